"""BDMC at chosen betas of the distortion path: sandwiching the one-run curve."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pandas as pd
import torch
from torch import Tensor

from pyrolik._random import resolve_seed
from pyrolik._validate import check_count, shared_params
from pyrolik.annealing.driver import run
from pyrolik.annealing.kernel import Kernel
from pyrolik.annealing.run import expand_latents, latents_to_flat, require_steps
from pyrolik.annealing.step_sizes import StepSizes
from pyrolik.distortion.curve import se_over_examples
from pyrolik.distortion.path import (
    DistortionFn,
    DistortionModel,
    as_log_z,
    distortion_model,
    grid_from_betas,
    grid_from_sigmas,
    log_normal_constant,
    merge_grid,
    sigma_of,
)
from pyrolik.exceptions import prefixed
from pyrolik.execution.batches import refuse_scope, warn_failed
from pyrolik.infer.sandwich import Simulated, _check_posterior_start, simulate
from pyrolik.model.arguments import mark_arguments, take_rows
from pyrolik.model.target import make_target
from pyrolik.ops.stats import log_mean_exp
from pyrolik.results import BDMCResult
from pyrolik.results.bdmc import DistortionBDMCConverter
from pyrolik.results.estimates import Exported
from pyrolik.results.layout import EX, stored
from pyrolik.results.table import Summary

__all__ = ["distortion_bdmc", "DistortionBDMC"]


@dataclass(frozen=True)
class DistortionBDMC(Exported):
    r"""BDMC along the distortion path at a few betas: per beta its own (simulated) data.

    ``lower`` / ``upper``: ``(c, N)`` stochastic bounds on :math:`\log Z_\beta(x)`, row ``j`` of ``x[j]``;
    fields declare their export.
    """

    converter: ClassVar[type] = DistortionBDMCConverter

    mode: str = stored("attrs", "mode")
    betas: Tensor = stored("bdmc", "beta", ["beta"], codec="coord")  # (c,)
    lower: Tensor = stored("bdmc", "lower", ["beta", EX])  # (c, N) forward AIS, log Z_beta
    upper: Tensor = stored("bdmc", "upper", ["beta", EX])  # (c, N) reverse AIS, log Z_beta
    distortion: Tensor = stored("bdmc", "distortion", ["beta", EX])  # (c, N) at the exact draws
    num_values: int = stored("attrs", "num_values")
    results: list[Any] = stored("beta", codec="results", default_factory=list)  # subtrees beta_j
    seed: int | None = stored("attrs", "seed", codec="seed", default=None)
    wall_time: float = stored("attrs", "wall_time", default=float("nan"))
    # the one pass's pilot table (a later call on the same data and points may reuse it); not saved
    step_sizes: Any = None

    def __post_init__(self) -> None:
        if self.mode == "user":  # each point's runs estimate log Z at its beta
            object.__setattr__(self, "results", [dataclasses.replace(
                r, lower=as_log_z(r.lower), upper=as_log_z(r.upper)) for r in self.results])

    @property
    def x(self) -> list[Tensor]:
        """Each checked point's data ``(N, *event_shape)`` (its result's ``x``)."""
        return [res.x for res in self.results]

    @property
    def sigmas(self) -> Tensor | None:
        return sigma_of(self.betas) if self.mode == "gaussian" else None

    @property
    def gap(self) -> Tensor:
        """``(c,)`` mean over examples of upper - lower (nats)."""
        return (self.upper - self.lower).mean(-1)

    @property
    def gap_stderr(self) -> Tensor:
        return se_over_examples(self.upper - self.lower)

    @property
    def rate_lower(self) -> Tensor:
        r"""``(c, N)`` :math:`-\hat U - \beta d`: a stochastic lower bound on the rate at the exact
        distortion (unbiased for :math:`D_\beta` over the exact draws)."""
        return -self.upper - self.betas.unsqueeze(-1) * self.distortion

    @property
    def rate_upper(self) -> Tensor:
        r"""``(c, N)`` :math:`-\hat L - \beta d`: a stochastic upper bound on the rate."""
        return -self.lower - self.betas.unsqueeze(-1) * self.distortion

    def log_likelihood_bounds(self) -> tuple[Tensor, Tensor]:
        """``(lower, upper)`` on log p_sigma(x), each ``(c, N)`` (Gaussian mode)."""
        if self.mode != "gaussian":
            raise ValueError("log p_sigma needs the Gaussian mode (squared error)")
        c = log_normal_constant(self.betas, self.num_values).unsqueeze(-1)
        return self.lower + c, self.upper + c

    def summary(self) -> pd.DataFrame:
        """One row per checked beta: bounds on log Z (and log p_sigma), the gap, the rate sandwich."""
        cols: dict[str, Any] = {"beta": self.betas}
        if self.mode == "gaussian":
            lo, up = self.log_likelihood_bounds()
            cols.update({"sigma": self.sigmas, "log p_sigma lower": lo.mean(-1),
                         "log p_sigma upper": up.mean(-1)})
        cols.update({"log Z lower": self.lower.mean(-1), "log Z upper": self.upper.mean(-1),
                     "gap [nats]": self.gap, "gap stderr": self.gap_stderr,
                     "distortion (exact draws)": self.distortion.mean(-1),
                     "rate lower": self.rate_lower.mean(-1), "rate upper": self.rate_upper.mean(-1),
                     # the rate bounds hold in expectation over one-draw distortions: their noise
                     "rate stderr": se_over_examples(self.rate_lower)})
        df = Summary({k: v.detach().cpu().double().numpy() for k, v in cols.items()})
        df.index.name = "checked beta"
        return df

    def warnings(self) -> list[str]:
        """Each checked point's BDMC warnings (a gap above 1 nat among them), in plain words."""
        names = (sigma_of(self.betas) if self.mode == "gaussian" else self.betas).tolist()
        what = "sigma" if self.mode == "gaussian" else "beta"
        return [prefixed(f"at {what} {v:.4g}: ", w)
                for v, res in zip(names, self.results, strict=True) for w in res.warnings()]



@shared_params
def distortion_bdmc(model: Callable[..., Any], data: int | Mapping[float, tuple[Tensor, Any]], *,
                    sigmas: Sequence[float] | Tensor | None = None,
                    betas: Sequence[float] | Tensor | None = None,
                    distortion: DistortionFn | None = None, check: Sequence[float] | None = None,
                    data_shape: tuple[int, ...] | None = None, num_steps: int | None,
                    num_chains: int, schedule: str | Tensor = "geometric",
                    kernel: Kernel | None = None, model_args: tuple = (),
                    model_kwargs: dict | None = None, seed: int | None = None,
                    batch_size: int | None = None, progress: bool = True,
                    step_sizes: StepSizes | None = None) -> DistortionBDMC:
    r"""BDMC at chosen points of the one-run curve, along the betas that curve visits.

    At each point in ``check``, data simulated with :math:`\sigma = 1/\sqrt{2\beta}` (or exact
    draws given in ``data``) get forward AIS, a stochastic lower bound on :math:`\log Z_\beta`, and reverse
    AIS, an upper bound [1]_; all points share one batched pass.

    Parameters
    ----------
    data : int or dict
        Examples to simulate at each checked point (with ``data_shape``), or ``{point: (x, latents)}``
        exact draws at every checked point (required for a user ``distortion``).
    sigmas, betas, distortion, num_steps, schedule
        Those of the :func:`pyrolik.sigma_curve` / :func:`pyrolik.rate_distortion` call to check.
    check : sequence of float, optional
        The grid points to check (default all).
    step_sizes : StepSizes, optional
        The pilot table of an earlier call on the same data and points.

    Returns
    -------
    DistortionBDMC
        ``lower``/``upper`` (c, N) on :math:`\log Z_\beta`, ``gap`` (c,), ``rate_lower``/``rate_upper``,
        ``results[j]``: point ``j``'s BDMC result.

    Examples
    --------
    >>> import pyrolik
    >>> from pyrolik_models import LinearGaussian
    >>> lg = LinearGaussian.random(data_dim=3, latent_dim=2, seed=0)
    >>> check = pyrolik.distortion_bdmc(lg, 4, sigmas=[0.5, 1.0, 2.0], data_shape=(3,),
    ...                                 num_steps=100, num_chains=8, seed=0, progress=False)
    >>> check.sigmas.tolist(), check.lower.shape, check.gap.shape
    ([2.0, 1.0, 0.5], torch.Size([3, 4]), torch.Size([3]))
    >>> bool((check.gap < 1.0).all())   # nats: 100 steps suffice at every sigma on this model
    True

    References
    ----------
    .. [1] S. Huang, A. Makhzani, Y. Cao, R. Grosse. Evaluating lossy compression rates of deep
       generative models. ICML, 2020.
    """
    refuse_scope("distortion_bdmc")
    start = time.perf_counter()
    check_count("num_chains", num_chains)
    seed = resolve_seed(seed)
    if (sigmas is None) == (betas is None):
        raise ValueError("pass the grid as exactly one of sigmas= or betas=")
    if sigmas is not None:
        if distortion is not None:
            raise ValueError("sigmas= means the squared error; pass betas= with a distortion")
        grid, _ = grid_from_sigmas(sigmas)
    else:
        assert betas is not None  # exactly one of the two, checked above
        grid = grid_from_betas(betas)
    mode = "gaussian" if distortion is None else "user"
    beta_max = float(grid[-1])
    grid_b = grid / beta_max
    grid_b[-1] = 1.0
    require_steps(num_steps, schedule, "base annealing steps, e.g. 1000", searches=False)
    path, steps = merge_grid(grid_b, schedule, num_steps)
    key = sigma_of(grid) if (mode == "gaussian" and sigmas is not None) else grid
    chosen = list(range(len(grid))) if check is None else [_find(key, c, "check") for c in check]
    simulated = isinstance(data, int) and not isinstance(data, bool)
    if mode == "user" and simulated:
        raise ValueError("a user distortion is not a noise model, so there is nothing to simulate "
                         "exact draws of q_beta from: pass data={beta: (x, latents)} with exact "
                         "draws for every checked beta")
    if (not simulated and not isinstance(data, Mapping)) or (simulated and data_shape is None):
        raise ValueError("pass data= a number of examples to simulate (with data_shape=), or "
                         "{point: (x, latents)} with exact draws at every checked point")
    given = {_find(key, k, "data"): v for k, v in data.items()} if isinstance(data, Mapping) else {}
    if not simulated and not given.keys() >= set(chosen):
        raise ValueError("data must give (x, latents) at every checked point (check=)")
    kwargs = dict(model_kwargs or {})
    models = {j: (distortion_model(model, sigma=(0.5 / float(grid[j])) ** 0.5) if mode == "gaussian"
                  else distortion_model(model, distortion=distortion, beta_max=float(grid[j])))
              for j in chosen}
    data_of = {j: simulate(models[j], data, data_shape=data_shape,  # type: ignore[arg-type]
                           model_args=model_args, model_kwargs=kwargs, seed=seed)
               if simulated else given[j] for j in chosen}
    sizes = {int(data_of[j][0].shape[0]) for j in chosen}
    if len(sizes) > 1:
        raise ValueError(f"data must give the same number of examples at every point, got {sizes}")
    # one pass: every point's examples anneal along the path of the largest checked beta, each
    # stopping at its own point (pyrolik.annealing.engine.run's stops)
    last = max(chosen)
    sub = path[: int(steps[last]) + 1] / path[steps[last]]
    sub[-1] = 1.0
    joint = _one_pass(models[last], [data_of[j] for j in chosen], sub,
                      [sub[int(steps[j])] for j in chosen], model_args, kwargs,
                      num_chains=num_chains, kernel=kernel, seed=seed, batch_size=batch_size,
                      progress=progress, step_sizes=step_sizes,
                      check=not all(isinstance(data_of[j], Simulated) for j in chosen))
    lower, upper, dist, results = [], [], [], []
    for i, j in enumerate(chosen):
        dm, stop = models[j], float(sub[int(steps[j])])
        x = data_of[j][0]
        num_values = dm.num_values(x, *model_args, **kwargs)
        constant = num_values * dm.offset
        res = _point_of(joint, i, x, stop, constant / stop - num_values * models[last].offset,
                        int(steps[j]))
        target = make_target(dm, x, 1, model_args=model_args, model_kwargs=kwargs)
        exact = latents_to_flat(target, expand_latents(target, res.latents, x.shape[0]))
        with torch.no_grad():
            ratio = target.program.log_prior_and_obs(exact)[1].double()
        lower.append(res.lower.log_likelihood.double() - constant)
        upper.append(res.upper.log_likelihood.double() - constant)
        dist.append((constant - ratio) / dm.beta_max)
        results.append(res)
    return DistortionBDMC(mode, grid[chosen].to(torch.float64), torch.stack(lower),
                          torch.stack(upper), torch.stack(dist), num_values, results, seed,
                          time.perf_counter() - start, joint.lower.step_sizes)


def _one_pass(dm: DistortionModel, data: list[tuple[Tensor, Any]], schedule: Tensor,
              stops: list[Tensor], model_args: tuple, model_kwargs: dict, *, num_chains: int,
              kernel: Kernel | None, seed: int, batch_size: int | None, progress: bool,
              step_sizes: StepSizes | None, check: bool) -> BDMCResult:
    """BDMC of ``dm`` on every point's data at once (examples of point ``i`` after those of the
    points before), along ``schedule``, the examples of point ``i`` stopping at ``stops[i]``."""
    n = data[0][0].shape[0]
    x = torch.cat([d[0] for d in data])
    marked = mark_arguments(tuple(model_args), model_kwargs, n)
    args, kwargs = take_rows(*marked, len(data), torch.arange(len(data) * n))
    first_args, first_kwargs = take_rows(*marked, 1, torch.arange(1))
    probe = make_target(dm, data[0][0][:1], num_chains, model_args=first_args,
                        model_kwargs=first_kwargs)
    latents = [expand_latents(probe, d[1], n) for d in data]
    latents_all = {name: torch.cat([lat[name] for lat in latents], dim=1) for name in latents[0]}
    if step_sizes is not None and (not isinstance(step_sizes, StepSizes)
                                   or step_sizes.log_step_size.shape[1] != x.shape[0]):
        raise ValueError("step_sizes must be the pilot table of an earlier distortion_bdmc call on "
                         "the same data and checked points (its .step_sizes)")
    stop_of = torch.cat([s.reshape(1).expand(n) for s in stops]).to(torch.float64)
    problem, out = run("distortion_bdmc", dm, x, directions=("forward", "reverse"),
                       num_steps=None, num_chains=num_chains, schedule=schedule, kernel=kernel,
                       latents=latents_all, model_args=args, model_kwargs=kwargs,
                       step_sizes=step_sizes, check=_check_posterior_start if check else None,
                       stops=stop_of, seed=seed, batch_size=batch_size, progress=progress,
                       desc="BDMC (distortion path)", scoped=False)
    assert out is not None  # one process
    lower, upper = out
    reverse = problem.legs[1].latents
    assert reverse is not None
    result = BDMCResult(lower=lower, upper=upper, x=x,
                        latents={name: v[0] for name, v in reverse.items()},
                        wall_time=lower.wall_time)
    warn_failed(result, "distortion_bdmc")
    return result


def _point_table(table: StepSizes, stop: float) -> StepSizes:
    r"""A point's rows of the pass's pilot table in its own units, :math:`b' = b / s` from 0 to 1
    (the table cut at the stop), the variances of :math:`r_i = s\,(r_J + \kappa)` times
    :math:`s^2`."""
    cut = table.cut(stop)
    betas = cut.betas / stop
    betas[-1] = 1.0
    return StepSizes(betas, cut.log_step_size, cut.inv_mass,
                     None if cut.log_ratio_var is None else stop**2 * cut.log_ratio_var)


def _point_of(joint: BDMCResult, i: int, x: Tensor, stop: float, kappa: float,
              steps_to_point: int) -> BDMCResult:
    r"""Point ``i``'s examples of the one pass, as the BDMC of its own wrapped model.

    The pass ran the wrapper of the largest checked beta :math:`\beta_J` (constant :math:`c_J`);
    point ``i`` stopped at :math:`s = \beta_i / \beta_J`. Its own wrapper's path is
    :math:`b' = b / s` with constant :math:`c_i`, so a running log-weight at :math:`b` differs by
    :math:`(b - b_0)\,\kappa`, :math:`\kappa = c_i / s - c_J`, :math:`b_0` the leg's start (0
    forward, :math:`s` reverse); betas are read in its units, :math:`b' = (b \wedge s) / s`.
    """
    n = x.shape[0]
    sl = slice(i * n, (i + 1) * n)
    legs = []
    for r in (joint.lower, joint.upper):
        forward = r.direction == "forward"
        origin = 0.0 if forward else stop
        assert r.log_weights is not None and r.schedule is not None and r.schedule.dim() == 1
        end = stop if forward else 0.0  # the leg's last beta
        lw = r.log_weights[:, sl] + (end - origin) * kappa
        trace = None
        if r.trace is not None:
            # the betas the rows were at (the engine capped them in the schedule's dtype), read as
            # exactly `stop` where capped, so that a held reverse weight stays exactly 0
            recorded = r.trace["beta"]
            held = recorded >= torch.tensor(stop, dtype=recorded.dtype)
            beta = torch.where(held, torch.tensor(stop, dtype=torch.float64), recorded.double())
            trace = {name: v[:, :, sl] for name, v in r.trace.items() if name != "beta"}
            if "log_weight" in trace:
                trace["log_weight"] = trace["log_weight"] + ((beta - origin) * kappa).unsqueeze(-1)
            if "log_ratio" in trace:  # r_i = s (r_J + kappa): the point's own log f1 - log f0
                trace["log_ratio"] = stop * (trace["log_ratio"] + kappa)
            trace["beta"] = (beta / stop).to(recorded.dtype)
        table = None if r.step_sizes is None else _point_table(r.step_sizes.rows(sl.start, sl.stop),
                                                               stop)
        ll = log_mean_exp(lw) if forward else -log_mean_exp(lw)

        def cut(v: Tensor | None, dim: int = 1) -> Tensor | None:
            return None if v is None else v.narrow(dim, sl.start, n)

        legs.append(dataclasses.replace(
            r, log_likelihood=ll.to(r.log_likelihood.dtype), log_weights=lw,
            ess=cut(r.ess, 0), mcse=cut(r.mcse, 0), khat=cut(r.khat, 0), x=x,
            num_observed=cut(r.num_observed, 0), final_state=cut(r.final_state),
            latents=None if r.latents is None else {k: v[:, sl] for k, v in r.latents.items()},
            acceptance_rate=cut(r.acceptance_rate), num_divergent=cut(r.num_divergent),
            ancestor=cut(r.ancestor), num_resampled=cut(r.num_resampled, 0),
            trace=trace, step_sizes=table,
            schedule=torch.minimum(r.schedule, torch.tensor(stop, dtype=r.schedule.dtype)) / stop,
            settings={**r.settings, "stop": stop, "steps_to_point": steps_to_point}))
    return BDMCResult(lower=legs[0], upper=legs[1], x=x,
                      latents={k: v[sl] for k, v in joint.latents.items()},
                      wall_time=joint.wall_time)


def _find(grid: Tensor, value: float, what: str) -> int:
    close = torch.isclose(grid, torch.tensor(float(value), dtype=torch.float64), rtol=1e-9)
    if not close.any():
        raise ValueError(f"{what}: {value} is not a point of the grid "
                         f"{[round(float(g), 6) for g in grid]}")
    return int(close.nonzero()[0])
