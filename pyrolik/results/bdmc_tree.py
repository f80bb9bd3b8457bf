r"""A BDMC result as a DataTree: both runs, the sandwich, and a simulation-based calibration check.

==================  ===========================================================================
node                variables (dims)
==================  ===========================================================================
``lower/``          the forward AIS run's export (:mod:`pyrolik.results.datatree`)
``upper/``          the reverse AIS run's export (``prior``, ``sample_stats_prior``, ...)
``evidence``        ``log_marginal_likelihood`` and ``mcse`` ``(bound, <plate>)`` with
                    ``bound = ["lower", "upper"]``; ``gap`` = upper - lower and
                    ``gap_mcse`` = :math:`\sqrt{\mathrm{mcse}_l^2 + \mathrm{mcse}_u^2}` ``(<plate>)``
``simulated``       the exact latents that generated ``x``, dims named as in ``posterior``:
                    ``<site> (<plate>, <site>_dim_i)``
``calibration``     ``<site> (<plate>, <site>_dim_i)``: the probability integral transform of each
                    simulated latent among the forward run's resampled draws (all blocks)
``posterior``,      the lower run's, so that ``az.summary(bdmc_idata)`` and ``az.plot_trace``
``sample_stats``    work on the root as on an AIS export
==================  ===========================================================================

The calibration check is simulation-based calibration (Talts et al. 2018) for free: the simulated
latents are exact posterior draws for the simulated ``x``, so when the forward run's resampled
posterior is right their PIT values :math:`\frac{1}{D}\#\{\text{draws} < z^*\}` (ties counted half)
are uniform on [0, 1] across examples; a run with too few steps gives PIT values piled at the ends
(draws too narrow) or in the middle (too wide). ``az.plot_ecdf`` of ``calibration`` shows it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import xarray as xr

from pyrolik.results.common import (
    NESTED,
    _created_at,
    _dataset,
    _event_dims,
    _np,
    _versions,
    example_dim,
)

__all__ = ["bdmc_tree", "pit"]


def pit(draws: xr.DataArray, truth: xr.DataArray) -> xr.DataArray:
    """Fraction of ``draws`` (over ``chain`` and ``draw``) below ``truth``, ties counted half."""
    below = (draws < truth).mean(("chain", "draw"))
    tied = (draws == truth).mean(("chain", "draw"))
    return (below + 0.5 * tied).astype(np.float64)


def bdmc_tree(result: Any, blocks: int, to_datatree: Callable[..., xr.DataTree]) -> xr.DataTree:
    """See the module docstring; ``to_datatree`` exports each run (:mod:`pyrolik.results.datatree`)."""
    n, ex = len(result.x), example_dim(result)
    coords = {ex: np.arange(n)}
    subs = {name: to_datatree(getattr(result, name), num_blocks=blocks) for name in NESTED}
    groups: dict[str, Any] = {}
    lo, up = result.lower, result.upper
    lml = np.stack([_np(lo.log_likelihood), _np(up.log_likelihood)])
    ev = {"log_marginal_likelihood": (("bound", ex), lml),
          "gap": ((ex,), _np(result.per_example_gap))}
    if lo.mcse is not None and up.mcse is not None:
        mcse = np.stack([_np(lo.mcse), _np(up.mcse)])
        ev["mcse"] = (("bound", ex), mcse)
        ev["gap_mcse"] = ((ex,), np.sqrt((mcse ** 2).sum(0)))
    groups["evidence"] = xr.Dataset(ev, coords={**coords, "bound": ["lower", "upper"]})
    if result.latents:
        lat = result.latents  # (N, *site), or (K, N, *site) with one draw per chain
        dims = {s: [ex] if v.shape[0] == n else ["sample", ex] for s, v in lat.items()}
        dims = {s: [*d, *_event_dims(s, lat[s].dim() - len(d))] for s, d in dims.items()}
        groups["simulated"] = _dataset(lat, dims, coords, [])
        post = subs["lower"].children.get("posterior")
        if post is not None and all(d[0] == ex for d in dims.values()):
            sim = groups["simulated"]
            groups["calibration"] = xr.Dataset({s: pit(post.dataset[s], sim[s]) for s in lat
                                                if s in post.dataset})
    for name in ("posterior", "sample_stats"):
        if name in subs["lower"].children:
            groups[name] = subs["lower"][name].to_dataset()
    for name, sub in subs.items():
        for group, node in sub.children.items():
            groups[f"{name}/{group}"] = node.to_dataset()
    tree = xr.DataTree.from_dict(groups)
    for name, sub in subs.items():
        tree[name].attrs = dict(sub.attrs)
    tree.attrs = {**_versions(), "pyrolik_result": "BDMCResult", "method": "bdmc",
                  "bound": "sandwich", "gap": float(result.gap),
                  "gap_stderr": float(result.gap_stderr), "wall_time": float(result.wall_time),
                  "created_at": _created_at(), "layout": subs["lower"].attrs["layout"]}
    return tree
