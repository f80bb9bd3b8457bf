r"""Results to ``xarray.DataTree`` / ``arviz.InferenceData``: the only package that builds xarray.

The principle (PyMC's ``sample_smc`` layout, without keeping per-stage values in ``sample_stats``):
``posterior`` holds equally weighted draws; ``chain`` indexes independent blocks of chains;
``sample_stats`` matches the posterior's draws; everything indexed by annealing step lives in its
own group on a ``step`` dim. So ``az.summary(result.to_inference_data())`` is meaningful as it is:
weighted means, and ``r_hat`` / ``ess`` across blocks that measure how noisy those means are.

Numpy dicts go through ArviZ's ``dict_to_dataset`` (ArviZ 0.23's, or ``arviz_base``'s in ArviZ 1.x),
one group at a time; the groups are assembled into a :class:`xarray.DataTree`, the common form of both
ArviZ generations. This package reads results by their attributes and does not import
:mod:`pyrolik.results`; reading back is :mod:`pyrolik.io.netcdf`. Groups of an AIS result
(``<plate>`` is the example dim, named after the model's data plate, e.g. ``data``, or ``example``):

==========================  ====================================================================
group                       what (module that builds it)
==========================  ====================================================================
``posterior``,              resampled final states, ``(chain, draw, <plate>, ...)``, ``chain`` =
``unconstrained_posterior``,  block; per-draw ``sample_stats`` (:mod:`pyrolik.results.weighted`);
``sample_stats``            reverse AIS: ``prior``, ``unconstrained_prior``, ``sample_stats_prior``
``particles``,              raw final states and weights ``(chain, particle, <plate>)``, per-block
``unconstrained_particles``   ``log_marginal_likelihood`` and ``ess`` (:mod:`pyrolik.results.weighted`)
``evidence``                pooled ``log_marginal_likelihood``, ``mcse``, ``ess``, ``pareto_k``
``annealing``               per recorded step, on ``step`` with a ``beta`` coordinate
                            (:mod:`pyrolik.results.annealing_group`); ``trajectory`` if states kept
``observed_data``           ``x`` ``(<plate>, x_dim_i)``; ``num_observed`` ``(<plate>)``, the
                            entries of each example the model observes (bits/dim's D), when counted
``constant_data``           ``schedule``, the pilot table; KDE: ``bandwidth_grid``,
                            ``validation_log_likelihood``
==========================  ====================================================================

IWAE and likelihood weighting have the same ``posterior`` (sampling-importance-resampling of the
kept draws), ``particles`` and ``evidence``; KDE has ``evidence`` only. Root attrs, all plain
``str``, ``int`` or ``float``: ``inference_library="pyrolik"``, the pyrolik, torch, pyro, arviz,
xarray and Python versions, ``pyrolik_result`` (the class), ``method``, ``bound``, ``direction``,
``path``, ``settings`` and ``kernel`` (JSON), ``seed``, ``wall_time``, ``created_at``,
``num_blocks``, ``layout`` (2; files without it are the earlier layout, still read by
:func:`pyrolik.load`). A BDMC result is a tree with ``lower`` and ``upper`` subtrees
(:mod:`pyrolik.results.bdmc_tree`); :func:`flatten` turns it into the one-level layout
``lower_posterior``, ..., ``upper_prior``, ... that ArviZ 0.x's ``InferenceData`` sees.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from pyrolik.ops.stats import DEFAULT_BLOCKS, check_blocks
from pyrolik.ops.stats import num_blocks as num_blocks_of
from pyrolik.results.annealing_group import annealing_groups
from pyrolik.results.bdmc_tree import bdmc_tree
from pyrolik.results.common import (  # noqa: F401  (re-exported: older imports of these names)
    DEFAULT_EXAMPLE_DIM,
    LAYOUT,
    NESTED,
    ORDER,
    SITE_GROUPS,
    _attrs,
    _created_at,
    _dataset,
    _event_dims,
    _is_ais,
    _np,
    _versions,
    example_dim,
)
from pyrolik.results.weighted import evidence_group, weighted_groups

__all__ = ["to_datatree", "to_inference_data", "flatten", "example_dim", "SITE_GROUPS",
           "DEFAULT_EXAMPLE_DIM"]

RESAMPLING_STREAM = 20240  # mixed with the result's seed: the export's own random stream


def _rng(result: Any) -> np.random.Generator:
    """The resampling stream: a fixed function of the result's seed, so exports are reproducible."""
    seed = getattr(result, "seed", None)
    return np.random.default_rng([RESAMPLING_STREAM, 0 if seed is None else int(seed) % 2**63])


def _estimate_groups(result: Any, ex: str, blocks: int) -> dict[str, xr.Dataset]:
    """posterior / particles / evidence (:mod:`pyrolik.results.weighted`), observed and constant data."""
    if result.log_weights is not None or getattr(result, "draws", None):
        groups = weighted_groups(result, ex, _dataset, blocks=blocks, rng=_rng(result))
    else:  # no weights kept (KDE, or keep_weights=False): the pooled estimate only
        groups = {"evidence": evidence_group(result, ex, _dataset, result.num_weights)}
    if result.x is not None:
        x_dims = {"x": [ex, *_event_dims("x", result.x.dim() - 1)]}
        observed = {"x": result.x}
        if getattr(result, "num_observed", None) is not None:
            observed["num_observed"], x_dims["num_observed"] = result.num_observed, [ex]
        groups["observed_data"] = _dataset(observed, x_dims, {ex: np.arange(result.num_examples)}, [])
    constant = {}
    if result.method == "kde" and result.settings.get("validation_log_likelihood") is not None:
        constant["bandwidth_grid"] = np.asarray(result.settings["bandwidth_grid"])
        constant["validation_log_likelihood"] = np.asarray(
            result.settings["validation_log_likelihood"])
    if constant:
        groups["constant_data"] = _dataset(constant, dict.fromkeys(constant, ["bandwidth"]), {}, [])
    return groups


def _ais_groups(result: Any, ex: str, blocks: int) -> dict[str, xr.Dataset]:
    groups = _estimate_groups(result, ex, blocks)
    c = num_blocks_of(result.log_weights.shape[0], blocks)
    groups.update(annealing_groups(result, ex, _dataset, c))
    return groups


def _tree(groups: dict[str, xr.Dataset], attrs: dict[str, Any]) -> xr.DataTree:
    groups = dict(sorted(groups.items(), key=lambda kv: ORDER.index(kv[0])))
    tree = xr.DataTree.from_dict(groups)
    tree.attrs = attrs
    return tree


def to_datatree(result: Any, *, num_blocks: int = DEFAULT_BLOCKS) -> xr.DataTree:
    """Export a result (AIS, reverse AIS, IWAE, likelihood weighting, KDE or BDMC) to a DataTree.

    Groups and dims are listed in the module docstring. ``num_blocks`` (C, default 4) is the number
    of ArviZ chains the K chains or samples are split into (:mod:`pyrolik.ops.stats` states the
    rule when K is not a multiple of C). Raw values equal the result's tensors; ``posterior`` holds
    the resampled draws, drawn from a stream fixed by the result's seed.
    """
    if getattr(result, "exports_itself", False):  # e.g. pyrolik.distortion's curves
        return result.to_datatree()
    check_blocks(num_blocks)
    if hasattr(result, "lower") and hasattr(result, "upper"):
        return bdmc_tree(result, num_blocks, to_datatree)
    if not (hasattr(result, "log_likelihood") and hasattr(result, "method")):
        raise TypeError(f"expected a pyrolik result (EstimateResult, AISResult or BDMCResult), got "
                        f"{type(result).__name__}")
    ex = example_dim(result)
    groups = (_ais_groups(result, ex, num_blocks) if _is_ais(result)
              else _estimate_groups(result, ex, num_blocks))
    attrs = _attrs(result)
    if getattr(result, "draws", None):
        attrs["num_blocks"] = int(result.draws["draw_index"].shape[0])
    elif result.log_weights is not None:
        attrs["num_blocks"] = int(num_blocks_of(result.log_weights.shape[0], num_blocks))
    return _tree(groups, attrs)


def flatten(tree: xr.DataTree) -> xr.DataTree:
    """One level of groups: a BDMC tree's ``lower/posterior`` becomes ``lower_posterior``, ....

    ArviZ 0.x's ``InferenceData`` and ``az.from_netcdf`` only see the groups under the root, so
    this is the layout of :func:`to_inference_data` and of the files :func:`pyrolik.save` writes.
    The attrs of ``lower`` and ``upper`` (method, bound, settings, ...) are carried onto each of
    their groups. A tree that is already flat is returned as it is.
    """
    if not any(node.children for node in tree.children.values()):
        return tree
    groups: dict[str, xr.Dataset] = {}
    for name, node in tree.children.items():
        if node.children:
            for group, leaf in node.children.items():
                ds = leaf.to_dataset()
                groups[f"{name}_{group}"] = ds.assign_attrs({**ds.attrs, **node.attrs})
        else:
            groups[name] = node.to_dataset()
    out = xr.DataTree.from_dict(groups)
    out.attrs = dict(tree.attrs)
    return out


def to_inference_data(result: Any, *, num_blocks: int = DEFAULT_BLOCKS):
    """Export to an :class:`arviz.InferenceData` (ArviZ 0.x); a DataTree under ArviZ 1.x.

    ``num_blocks``: see :func:`to_datatree`. A BDMC result's nested tree is flattened
    (:func:`flatten`): its groups are ``lower_posterior``, ``lower_sample_stats``, ...,
    ``upper_prior``, ..., beside the root ``posterior`` (the lower run's), ``evidence``,
    ``simulated`` and ``calibration``.
    """
    import arviz as az

    if isinstance(result, xr.DataTree):
        tree = result
    else:
        tree = to_datatree(result, num_blocks=num_blocks)
    if not hasattr(az, "InferenceData"):  # ArviZ 1.x: the DataTree is its InferenceData
        return tree
    flat = flatten(tree)
    # Any: InferenceData's **kwargs stub also covers its bool options, so a dict of Datasets fails
    groups: dict[str, Any] = {name: node.to_dataset() for name, node in flat.children.items()}
    return az.InferenceData(attrs=dict(flat.attrs), **groups)
