"""The BDMC convergence study: lower and upper bounds against annealing steps (Wu et al. fig. 2b).

``bdmc_convergence`` reruns :func:`pyrolik.bdmc` on one fixed simulated data set for each entry of
``num_steps`` and returns a tidy table; ``plot_bdmc_convergence`` draws both bounds against steps or
seconds, with standard-error bands. The gap at a given cost is what a user pays for: pick the
smallest number of steps whose gap is below the precision you need.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from pyrolik._validate import check_count
from pyrolik.execution.distributed import main_result
from pyrolik.infer.sandwich import Simulated, bdmc, simulate

__all__ = ["bdmc_convergence", "plot_bdmc_convergence"]


def bdmc_convergence(
    model: Callable[..., Any],
    num_examples: int | None = None,
    *,
    num_steps: Sequence[int],
    data_shape: tuple[int, ...] | None = None,
    data: Simulated | tuple | None = None,
    num_chains: int,
    seed: int | None = 0,
    **bdmc_kwargs: Any,
) -> pd.DataFrame:
    """BDMC at each ``num_steps`` on the same simulated data: one row per entry.

    Columns: ``num_steps``, ``lower``, ``lower_se``, ``upper``, ``upper_se`` (means over examples
    and their standard errors from the chains' MCSE), ``gap``, ``gap_se`` (over examples),
    ``seconds`` (wall time of the run) and ``gradient_evals`` (per chain and example, pilot
    included). Extra keyword arguments go to :func:`pyrolik.bdmc` (``kernel``, ``init``, ...).
    """
    steps = [check_count("num_steps entries", s) for s in num_steps]
    if not steps:
        raise ValueError("num_steps must list at least one number of annealing steps")
    if data is None:
        if num_examples is None or data_shape is None:
            raise ValueError("pass num_examples= and data_shape=, or data=(x, latents)")
        data = simulate(model, num_examples, data_shape=data_shape, seed=seed,
                        model_args=bdmc_kwargs.get("model_args", ()),
                        model_kwargs=bdmc_kwargs.get("model_kwargs"))
    rows = []
    for s in sorted(steps):
        r = main_result(bdmc(model, data=data, num_steps=s, num_chains=num_chains, seed=seed,
                             **bdmc_kwargs), "bdmc")
        assert r.lower.mcse is not None and r.upper.mcse is not None  # AIS reports its MCSE
        kern = r.lower.kernel
        strategy = kern.adaptation  # its pilot runs pilot_chains (default K) of the 2K chains
        pilot = (strategy.pilot_transitions(s) * strategy.pilot_chains(num_chains)
                 / (2 * num_chains))
        n = len(r.x)
        rows.append({
            "num_steps": s,
            "lower": r.lower.mean,
            "lower_se": float(r.lower.mcse.pow(2).sum().sqrt() / n),
            "upper": r.upper.mean,
            "upper_se": float(r.upper.mcse.pow(2).sum().sqrt() / n),
            "gap": r.gap,
            "gap_se": r.gap_stderr,
            "seconds": r.wall_time,
            "gradient_evals": (s + pilot) * kern.num_leapfrog,
        })
    return pd.DataFrame(rows)


def plot_bdmc_convergence(table: pd.DataFrame, x: str = "num_steps", ax=None, title: str = ""):
    """Lower and upper bounds against ``x`` ("num_steps" or "seconds"), log scale; returns the axes."""
    import matplotlib.pyplot as plt

    if x not in ("num_steps", "seconds", "gradient_evals"):
        raise ValueError(f"x must be 'num_steps', 'seconds' or 'gradient_evals', got {x!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.5))
    t = table.sort_values(x)
    for name, color in (("upper", "tab:red"), ("lower", "tab:blue")):
        direction = "reverse" if name == "upper" else "forward"
        ax.plot(t[x], t[name], "o-", color=color, label=f"{name} bound ({direction} AIS)")
        se = t[f"{name}_se"].to_numpy()
        ax.fill_between(t[x], t[name] - 2 * se, t[name] + 2 * se, color=color, alpha=0.2)
    ax.set_xscale("log")
    ax.set_xlabel({"num_steps": "annealing steps", "seconds": "wall time [s]",
                   "gradient_evals": "gradient evaluations per chain"}[x])
    ax.set_ylabel("average log p(x) [nats]")
    ax.set_title(title or f"BDMC: final gap {t['gap'].iloc[-1]:.2f} nats")
    ax.legend(frameon=False)
    return ax
