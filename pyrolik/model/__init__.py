"""The adapter: a Pyro program (and guide) as batched log-density functions of a flat latent."""
