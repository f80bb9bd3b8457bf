"""The adapter: a Pyro program (and guide) as batched log-density functions of a flat latent.

:mod:`~pyrolik.model.target` is the facade; the rule every construct follows is ``docs/idioms.md``.
"""

from pyrolik.model.arguments import per_example, shared

__all__ = ["per_example", "shared"]
