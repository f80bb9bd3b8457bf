r"""What an AIS run recorded along its path: the ``annealing``, ``trajectory`` and ``constant_data`` groups.

``K`` chains in ``C`` blocks of ``M`` (:mod:`pyrolik.ops.stats`), ``R`` recorded steps, ``N``
examples (dim ``<plate>``):

=================  ==========================================================================
group              variables (dims)
=================  ==========================================================================
``annealing``      per chain at each recorded step: ``acceptance_rate``, ``step_size``,
                   ``diverging``, ``energy_error``, the running ``log_weight`` (and whatever
                   else the run recorded) ``(step, chain, particle, <plate>)``; per block the
                   running ``log_marginal_likelihood`` and ``ess`` ``(step, chain, <plate>)``.
                   ``step`` is the annealing step; ``beta`` a coordinate along it
                   (``(step, <plate>)`` when batches annealed along their own schedules)
``trajectory``     recorded states ``u (step, chain, particle, <plate>, latent_dim)``, if kept
``constant_data``  ``schedule (step)`` (``(step, <plate>)`` for per-batch schedules); the pilot
                   table ``pilot_beta``, ``log_step_size``, ``inv_mass``, ``log_ratio_var``
                   ``(pilot_step, <plate>[, latent_dim])``
=================  ==========================================================================

The running block ``log_marginal_likelihood`` is :math:`\log\frac1M\sum_m w_m^{(t)}` for forward
AIS, a stochastic lower bound on :math:`\log Z_{\beta_t}`; for reverse AIS it is shifted to 0 at
:math:`\beta = 0` (:func:`pyrolik.diagnostics.running_log_normalizer`), ending at the block's
upper estimate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pyrolik.results.weighted import BLOCK_DIMS, _log_mean_exp, _np, blocked, kish_ess

__all__ = ["annealing_groups", "DERIVED"]

#: Variables of ``annealing`` computed from the others (not read back by :mod:`pyrolik.io.netcdf`).
DERIVED = ("log_marginal_likelihood", "ess")


def _beta_coord(beta: np.ndarray, ex: str):
    """``(R, K)`` or ``(R, K, N)`` recorded betas -> a ``beta`` coordinate along ``step``."""
    if beta.ndim == 3:
        return (["step", ex], beta[:, 0, :])
    return ("step", beta[:, 0])


def annealing_groups(result: Any, ex: str, make_dataset, c: int) -> dict[str, Any]:
    """``annealing``, ``trajectory`` and ``constant_data`` for an AIS result, ``c`` blocks."""
    groups: dict[str, Any] = {}
    n = result.log_weights.shape[1]
    if result.trace:
        steps = _np(result.trace_steps)
        coords: dict[str, Any] = {"step": steps, "chain": np.arange(c), ex: np.arange(n)}
        beta = _beta_coord(_np(result.trace["beta"]), ex)
        data, dims = {}, {}
        for name, v in result.trace.items():
            if name in ("beta", "z"):
                continue
            v = blocked(_np(v), c, axis=1)  # (R, C, M, N, ...)
            data[name] = v
            dims[name] = ["step", *BLOCK_DIMS, ex, *[f"{name}_dim_{i}" for i in
                                                     range(v.ndim - 4)]]
        if "log_weight" in data:
            lw = data["log_weight"].astype(np.float64)
            lml = _log_mean_exp(lw, axis=2)
            if result.direction == "reverse":
                lml = lml - _log_mean_exp(blocked(_np(result.log_weights).astype(np.float64), c),
                                          axis=1)
            data["log_marginal_likelihood"], dims["log_marginal_likelihood"] = lml, [
                "step", "chain", ex]
            data["ess"], dims["ess"] = kish_ess(lw, axis=2), ["step", "chain", ex]
        coords["particle"] = np.arange(result.log_weights.shape[0] // c)
        groups["annealing"] = make_dataset(data, dims, coords, []).assign_coords(beta=beta)
        if "z" in result.trace:
            z = blocked(_np(result.trace["z"]), c, axis=1)
            groups["trajectory"] = make_dataset(
                {"u": z}, {"u": ["step", *BLOCK_DIMS, ex, "latent_dim"]}, coords,
                []).assign_coords(beta=beta)
    constant: dict[str, Any] = {}
    dims = {}
    if result.schedule is not None:
        constant["schedule"] = result.schedule
        dims["schedule"] = ["step"] if result.schedule.dim() == 1 else ["step", ex]
    table = result.step_sizes
    if table is not None:
        constant["pilot_beta"], dims["pilot_beta"] = table.betas, ["pilot_step"]
        constant["log_step_size"], dims["log_step_size"] = table.log_step_size, ["pilot_step", ex]
        if table.inv_mass is not None:
            constant["inv_mass"] = table.inv_mass
            dims["inv_mass"] = ["pilot_step", ex, "latent_dim"]
        if table.log_ratio_var is not None:
            constant["log_ratio_var"] = table.log_ratio_var
            dims["log_ratio_var"] = ["pilot_step", ex]
    if constant:
        groups["constant_data"] = make_dataset(constant, dims, {ex: np.arange(n)}, [])
    return groups
