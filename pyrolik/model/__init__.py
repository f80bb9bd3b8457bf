"""The adapter: a Pyro program (and guide) as batched log-density functions of a flat latent.

- :mod:`~pyrolik.model.target`: the facade, ``make_target`` -> ``Target`` and its annealing paths;
  ``prepare_inputs`` for the estimators' batches;
- discovery and layout: :mod:`~pyrolik.model.discovery` traces the model once and freezes what it
  finds in a :class:`~pyrolik.model.layout.Layout` (flat unconstrained ``u`` <-> per-site values);
- the rule of ``docs/idioms.md`` (every Pyro construct evaluated as the model's unscaled,
  unsubsampled density, or refused in words): :mod:`~pyrolik.model.constructs`,
  :mod:`~pyrolik.model.modules` (training mode, randomness), :mod:`~pyrolik.model.supports`
  (supports pyrolik can map, circular latents), :mod:`~pyrolik.model.rows` (per-row densities),
  :mod:`~pyrolik.model.arguments` (per-example arguments), :mod:`~pyrolik.model.autoguides`,
  :mod:`~pyrolik.model.hints` (errors by cause), :mod:`~pyrolik.model.simulation`,
  :mod:`~pyrolik.model.mixture_guides` (M2-style guides as mixture proposals),
  :mod:`~pyrolik.model.dataset` (a model with global latents as a model of whole data sets);
- evaluation: :mod:`~pyrolik.model.evaluation` (the one plain evaluation) over
  :mod:`~pyrolik.model.messenger` and :mod:`~pyrolik.model.site_density`, with the optional layers
  :mod:`~pyrolik.model.guide_cache` (kept guide) and :mod:`~pyrolik.model.replay`;
- :mod:`~pyrolik.model.sampling`: the samplers CSL's chains need.
"""

from pyrolik.model.arguments import per_example, shared

__all__ = ["per_example", "shared"]
