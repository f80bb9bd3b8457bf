"""Running an estimator: batches with their own random streams, processes, faults, checkpoints."""
