"""Input and output: export to xarray/ArviZ, result files, checkpoints, data sets."""
