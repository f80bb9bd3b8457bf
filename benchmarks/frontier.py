"""Accuracy per gradient: the BDMC gap against gradient evaluations per chain, for several kernels.

One simulated data set per model; for each candidate kernel and each budget ``G`` (gradient
evaluations per chain of the estimating run), BDMC with ``num_steps = G / num_leapfrog``. The x axis
counts every gradient evaluation per chain, the pilot's included (spread over the BDMC chains), so a
kernel that tunes longer pays for it. Prints a table and draws the gap against the evaluations and
against the wall seconds (two panels, log-log, standard-error bars) to
``benchmarks/figures/frontier_<model>.png``; ``frontier_summary.py`` draws the same from several
runs' logs.

Candidates: ``default`` (``HMC()``: L = 3, momentum persistence 0.5 since session 7), and names
relative to Wu et al.'s kernel (L = 10, a fresh momentum: ``L10``, the default of pyrolik 0.1), so
that the commands in RESULTS.md keep their meaning: ``L5`` / ``L20`` (the number of leapfrog steps
traded against annealing steps), ``mass`` (diagonal mass matrix from the pilot), ``no-jitter``,
``fixed`` (``adapt=None`` at ``--fixed-step``), ``per-example`` (the default kernel with
``schedule="adaptive_per_example"``: one schedule per example from its pilot variances instead of
one pooled over the batch), and any name built of ``L<n>``, ``p<alpha>`` and
``m`` and ``r<t>`` (resampling at ESS below ``t`` of the chains): ``p0.8`` is partial momentum refreshment (``momentum_persistence=0.8``) at L = 10, ``L5p0.8``
the same with 5 leapfrog steps, ``L3p0.5m`` (the default) adds the pilot's diagonal mass matrix.
Each row also gives the run's wall and CPU (user + system) seconds: CPU time above wall time means
more than one core was used.

The BlackJAX peers (``--model mnist`` or ``vae``, when jax and blackjax import: ``pip install
blackjax``; ``_blackjax_peer.py``) anneal the same target (the decoder's weights copied, the
observation model rebuilt; checked against the Pyro model's trace at 10 z before any run) on the
same simulated examples, forward from the prior and reverse from the simulated latents:

- ``bjx-adaptive``: BlackJAX at its best, ``blackjax.adaptive_tempered_smc`` (next temperature from
  a target ESS, systematic resampling at every temperature) inside ``blackjax.inner_kernel_tuning``
  (the step size from the particles' acceptance rates: BlackJAX's
  ``update_scale_from_acceptance_rate`` at target ``--peer-accept`` 0.65, averaged into one step
  size for all particles), HMC with ``--peer-leapfrog`` (3) steps, ``--peer-mcmc-steps`` (1) moves
  per temperature. Its target ESS (``--peer-ess``, 0: placed) is chosen for the budget by forward
  pilots on 10 examples (not counted in the rows: ``place_ess``, the power law T ~ (1 / ESS - 1)^b
  refitted until a pilot's mean T is within 10% of the budget's), with BlackJAX's ESS root solver at
  a tolerance relative to the target (its default, 1e-4 on log ESS, stalls above ESS ~ 0.9999:
  ``_blackjax_peer.smc``); a row that fails is printed as FAILED and the command goes on. The reverse run tempers posterior -> prior along the
  forward run's temperatures (an adaptive reverse would jump to the prior in one step: its particles
  start identical, so every increment has ESS = K). Its temperatures come from the particles it then
  weights, so its bounds are biased (with 10 particles, by more than the gap on the digits VAE): the
  rows printed last, each row's bounds against the default's sandwich at the largest budget on the
  same examples, show it (``--save-bounds`` keeps them for ``frontier_summary.py --bounds``).
  ``bjx-adaptive:L10:M0:ess0.5`` (BlackJAX's examples' ESS 0.5, M placed) and other overrides
  (``L``, ``M``, ``ess``, ``tune=``, ``acc``) name variants. ``--peer-tune`` (or ``:tune=``):
  ``step`` keeps BlackJAX's step size per particle, ``mass+...`` adds the inverse mass matrix from
  the particles' variances (Buchholz et al.); both bias BlackJAX's bounds with 10 particles
  (RESULTS.md), so the best *valid* configuration shares one step size and no mass matrix.
- ``bjx-tempered``: ``blackjax.tempered_smc`` (resampling at every temperature) with the same tuning
  along the sigmoid schedule of ``G / (M L + 1)`` temperatures.
- ``blackjax``: the weak configuration, tempered SMC with resampling off as AIS, L = 10 at a fixed
  step ``--peer-step`` (0.1), sigmoid schedule of ``G / 10`` steps.

Their x value counts L gradients per trajectory and the value-and-gradient BlackJAX re-evaluates at
each temperature's start (``T (M L + 1)``; the adaptive T is random: its mean over examples and
directions). Their seconds exclude XLA's compilation (printed apart); ``--threads 1`` pins torch to
one thread and XLA's CPU backend to one (``XLA_FLAGS``).

    PYTHONPATH=. python benchmarks/frontier.py --model lg --budgets 100 200 400 800
    PYTHONPATH=. python benchmarks/frontier.py --model vae --examples 20 --budgets 250 500 1000
    PYTHONPATH=. python benchmarks/frontier.py --model mnist --examples 20 --budgets 500 1000 2000
    PYTHONPATH=. python benchmarks/frontier.py --model vae --examples 100 --chains 10 \
        --budgets 1000 2000 --candidates default bjx-adaptive bjx-tempered blackjax

``lg``: LinearGaussian(5, 2, s=0.3); ``vae``: the shipped digits VAE; ``mnist``: the binarized-MNIST
50-200-200-784 reference IWAE (``checkpoints/reference_iwae.pt``, as in ``bench_bdmc.py``).
"""

from __future__ import annotations

import argparse
import os
import re
import time
from pathlib import Path

import numpy as np
import torch

import pyrolik
from benchmarks._common import machine

HERE = Path(__file__).resolve().parent

WU = {"num_leapfrog": 10, "momentum_persistence": 0.0}  # what the other names are relative to
CANDIDATES = {
    "default": {"smc": True},  # pyrolik.SMC(): the library's default, whatever it is
    "ais": {"resample": None},  # the default move, plain AIS (the default until session 11)
    "per-example": {"schedule": "adaptive_per_example", "smc": True},  # a schedule per example
    "mass": {**WU, "mass_matrix": True},
    "no-jitter": {**WU, "step_jitter": 0.0},
    "fixed": {**WU, "adapt": None},
}


def settings(name: str) -> dict:
    """The arguments of a candidate: a named one, or ``L<n>``, ``p<alpha>``, ``m``, ``r<t>`` (SMC
    resampling at ESS below ``t``) and ``i<B>`` (``B`` islands; none: the default) combined; a name
    without ``r`` is plain AIS. ``+enc`` after any of them: AIS+encoder (``init=model.guide``)."""
    if name.endswith("+enc"):
        return {**settings(name[: -len("+enc")]), "encoder": True}
    if name in CANDIDATES:
        return dict(CANDIDATES[name])
    m = re.fullmatch(r"(?:L(\d+))?(?:p(0?\.\d+))?(m)?(?:r(0?\.\d+|1))?(?:i(\d+))?", name)
    if not name or m is None:
        raise ValueError(f"unknown candidate {name!r}: one of {list(CANDIDATES)}, or "
                         "L<n>p<alpha>m r<t> i<B>")
    kw: dict = dict(WU)
    if m.group(1):
        kw["num_leapfrog"] = int(m.group(1))
    if m.group(2):
        kw["momentum_persistence"] = float(m.group(2))
    if m.group(3):
        kw["mass_matrix"] = True
    kw["resample"] = float(m.group(4)) if m.group(4) else None
    if m.group(5):
        kw["islands"] = int(m.group(5))
    return kw


def make_kernel(kw: dict) -> pyrolik.SMC:
    """The SMC kernel of a candidate's arguments (``smc``: the library's default)."""
    kw = dict(kw)
    if kw.pop("smc", False):
        return pyrolik.SMC()
    smc = {k: kw.pop(k) for k in ("resample", "islands") if k in kw}
    return pyrolik.SMC(pyrolik.HMC(**kw), **smc)


def _model(name: str):
    if name == "lg":
        from models.oracles.linear_gaussian import LinearGaussian

        return LinearGaussian.random(5, 2, s=0.3, seed=0, dtype=torch.float32), (5,)
    from models.zoo.serialization import load

    if name == "mnist":  # the hard reference model of bench_bdmc.py (simulated data: no data set)
        return load("iwae", str(HERE / "checkpoints" / "reference_iwae.pt"),
                    dtype=torch.float32), (784,)
    return load("vae", dtype=torch.float32), (64,)


PEERS = ("blackjax", "bjx-tempered", "bjx-adaptive")


def peer_settings(name: str, args) -> tuple[str, argparse.Namespace] | None:
    """A peer's name and settings: ``bjx-adaptive`` takes ``--peer-*``; ``bjx-adaptive:L10:M0:ess0.5``
    overrides them (L, M, ess, tune=, acc); None for a pyrolik candidate."""
    base, *mods = name.split(":")
    if base not in PEERS:
        return None
    ns = argparse.Namespace(**{k: v for k, v in vars(args).items() if k.startswith("peer_")})
    for m in mods:
        key = re.fullmatch(r"(L|M|ess|tune=|acc)(.+)", m)
        if key is None:
            raise ValueError(f"peer modifier {m!r}: L<n>, M<n>, ess<f>, tune=<t>, acc<f>")
        k, v = key.groups()
        attr = {"L": "peer_leapfrog", "M": "peer_mcmc_steps", "ess": "peer_ess",
                "tune=": "peer_tune", "acc": "peer_accept"}[k]
        setattr(ns, attr, v if k == "tune=" else type(getattr(ns, attr))(v))
    return base, ns


def _peer_row(out: dict, steps: float, t0: float, c0: float) -> dict:
    gap = torch.as_tensor(out["upper"] - out["lower"])
    return {"num_steps": steps, "gradient_evals": float(out["grads_per_chain"]),
            "lower": np.asarray(out["lower"]), "upper": np.asarray(out["upper"]),
            "gap": float(gap.mean()), "gap_se": float(gap.std() / len(gap) ** 0.5),
            "seconds": out["run_s"], "cpu_seconds": out["run_cpu_s"],
            "compile_seconds": out["compile_s"], "total_seconds": time.perf_counter() - t0,
            "total_cpu_seconds": time.process_time() - c0}


def run_peer(name: str, args, model, sim, budget: int, chains: int, seed: int) -> dict:
    """A BlackJAX configuration at ``budget`` gradient evaluations per chain (``_blackjax_peer.py``).

    ``blackjax``: AIS (resampling off), L = 10, a fixed step size, sigmoid schedule of G / 10 steps.
    ``bjx-tempered``: tempered SMC (systematic resampling) with inner-kernel tuning along the sigmoid
    schedule of G / (M L + 1) temperatures. ``bjx-adaptive``: adaptive tempered SMC (ESS target
    ``--peer-ess``) with inner-kernel tuning; M MCMC steps per temperature, chosen for the budget by
    a placement pilot when ``--peer-mcmc-steps 0``. Seconds: the run's (``seconds``, ``cpu_seconds``)
    without XLA's compilation (``compile_seconds``).
    """
    from benchmarks import _blackjax_peer as peer

    x, z = sim.x.numpy(), sim.latents["z"].numpy()
    L, M = args.peer_leapfrog, args.peer_mcmc_steps
    t0, c0 = time.perf_counter(), time.process_time()
    if name == "blackjax":
        steps = max(1, budget // 10)
        out = peer.bdmc(model, x, z, num_chains=chains, betas=pyrolik.schedules.sigmoid(steps).numpy(),
                        step_size=args.peer_step, num_leapfrog=10, seed=seed)
        return _peer_row(out, steps, t0, c0)
    kw = {"num_chains": chains, "num_leapfrog": L, "step_size": args.peer_step,
          "tune": args.peer_tune, "target_accept": args.peer_accept, "seed": seed}
    if name == "bjx-tempered":
        M = M or 1
        steps = max(1, round(budget / (M * L + 1)))
        out = peer.smc(model, x, z, method="tempered", num_mcmc_steps=M,
                       betas=pyrolik.schedules.sigmoid(steps).numpy(), **kw)
        return _peer_row(out, steps, t0, c0)
    ess = args.peer_ess
    if not ess:  # placed for the budget (M given, 1 if placed)
        M = M or 1
        ess = place_ess(model, x[:10], kw, M, budget, _PILOTS.setdefault(
            (id(model), seed, chains, M, L, args.peer_tune, args.peer_accept), []))
        t0, c0 = time.perf_counter(), time.process_time()
    elif not M:  # M placed for the budget at the given ESS: a forward pilot on (at most) 10 examples
        pilot = peer.smc(model, x[:10], None, method="adaptive", num_mcmc_steps=1, target_ess=ess,
                         **kw)
        t1 = float(pilot["temps_fwd"].mean())
        M = max(1, round((budget / t1 - 1) / L))
        print(f"  placement: {t1:.1f} temperatures at ESS {ess}, M = 1 -> M = {M} "
              f"({time.perf_counter() - t0:.1f} s, not counted)", flush=True)
        t0, c0 = time.perf_counter(), time.process_time()
    kw["max_temps"] = room(budget / (M * L + 1))
    out = peer.smc(model, x, z, method="adaptive", num_mcmc_steps=M, target_ess=ess, **kw)
    temps = np.concatenate([out["temps_fwd"], out["temps_rev"]])
    row = _peer_row(out, float(temps.mean()), t0, c0)
    row["peer"] = (f"ESS {ess:.6f} M={M} T={temps.mean():.1f} (max {temps.max()}, "
                   f"{budget / (M * L + 1):.0f} placed) step {out['step_size']:.3f} "
                   f"acc {out['accept']:.2f}, {out['stalls']:.0f} stalled")
    return row


def room(temps: float) -> int:
    """``max_temps`` for an adaptive run placed at ``temps`` temperatures: 8x, at least 4096, a power
    of 2 (the runs of one K at several budgets then share one compilation)."""
    return max(4096, 1 << int(np.ceil(np.log2(8 * temps))))


_PILOTS: dict = {}  # the placement pilots' (1 / ESS - 1, mean T) per model, seed, K and kernel


def place_ess(model, x, kw: dict, M: int, budget: float, pilots: list, tol: float = 0.1,
              rounds: int = 6) -> float:
    """The target ESS whose adaptive run has T = ``budget / (M L + 1)`` temperatures on average:
    forward pilots on ``x`` (10 examples; their gradients are not counted in the rows), each placed
    by the power law T = a (1 / ESS - 1)^b through the two pilots nearest the target in T
    (b = -1/2 from one: the ESS solver's small-step limit), until a pilot's mean T is within ``tol``
    of the target; the ESS returned is the law's through the last two. ``pilots`` keeps the points
    (``1 / ESS - 1``, mean T) across budgets of one K, so a later budget starts from them."""
    from benchmarks import _blackjax_peer as peer

    L = kw["num_leapfrog"]
    target = budget / (M * L + 1)
    t0 = time.perf_counter()

    def law() -> float:
        """log(1 / ESS - 1) at the target from the pilots nearest it (exponent -1/2 from one)."""
        near = sorted(pilots, key=lambda p: abs(np.log(p[1] / target)))[:2]
        (u1, t1), *rest = [(np.log(v), np.log(t)) for v, t in near]
        b = -0.5
        if rest and abs(rest[0][0] - u1) > 1e-3:
            b = float(np.clip((rest[0][1] - t1) / (rest[0][0] - u1), -0.8, -0.3))
        return u1 + (np.log(target) - t1) / b

    tried = []
    for _ in range(rounds):
        v = float(np.exp(law())) if pilots else 1 / 0.99 - 1  # the first pilot of a K: ESS 0.99
        ess = 1 / (1 + v)
        out = peer.smc(model, x, None, method="adaptive", num_mcmc_steps=M, target_ess=ess,
                       **{**kw, "max_temps": room(target)})
        t = float(out["temps_fwd"].mean())
        pilots.append((v, t))
        tried.append(f"T {t:.0f} at ESS {ess:.6f}")
        if abs(t / target - 1) <= tol:
            break
    ess = 1 / (1 + float(np.exp(law())))
    print(f"  placement for T = {target:.0f}: {', '.join(tried)} -> ESS {ess:.6f} "
          f"({time.perf_counter() - t0:.1f} s, not counted)", flush=True)
    return ess


def steps_for_total(kernel: pyrolik.SMC, total: int, chains: int, pilot_share: float = 0.5) -> int:
    """The most annealing steps whose BDMC costs at most ``total`` gradient evaluations per example and
    leg: ``chains`` chains of ``T L + 1`` and half the pilot's (the pilot serves both legs;
    ``pilot_share=1``: one forward run, the whole pilot counted)."""
    L, a = kernel.move.num_leapfrog, kernel.move.adaptation
    pilot_chains = a.pilot_chains(chains)

    def cost(t: int) -> float:
        p = a.pilot_transitions(t)
        return chains * (t * L + 1) + pilot_share * ((p * L + 1) * pilot_chains if p else 0)

    t = max(1, total // (chains * L))
    while t > 1 and cost(t) > total:
        t -= 1
    return t


def run(model, sim, kernel: pyrolik.SMC, budget: int, chains: int, seed: int,
        schedule: str = "auto", total: int | None = None, init=None) -> dict:
    steps = (steps_for_total(kernel, total, chains) if total is not None
             else max(1, budget // kernel.move.num_leapfrog))
    t0, c0 = time.perf_counter(), time.process_time()
    r = pyrolik.bdmc(model, sim, num_steps=steps, num_chains=chains, kernel=kernel,
                     schedule=schedule, seed=seed, progress=False, init=init)
    s = r.lower.settings
    per_chain = (2 * s["gradient_evals_per_example"] + s["pilot_gradient_evals_per_example"]) \
        / (2 * chains)
    return {"num_steps": steps, "gradient_evals": per_chain, "gap": r.gap, "gap_se": r.gap_stderr,
            "lower": r.lower.log_likelihood.double().numpy(),
            "upper": r.upper.log_likelihood.double().numpy(),
            "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["lg", "vae", "mnist"], default="lg")
    p.add_argument("--examples", type=int, default=20)
    p.add_argument("--chains", type=int, nargs="+", default=[8],
                   help="chains per example (with --totals, several: the split is free)")
    p.add_argument("--budgets", type=int, nargs="+", default=[100, 200, 400, 800],
                   help="gradient evaluations per chain (one --chains)")
    p.add_argument("--totals", type=int, nargs="+", default=None,
                   help="gradient evaluations per example and leg, pilot's half included (BDMC's "
                        "pilot serves both legs), at every --chains: the axis a user pays")
    p.add_argument("--candidates", nargs="+", default=list(CANDIDATES),
                   help="names of CANDIDATES, or L<n>, p<alpha>, m (mass matrix) combined: L3p0.5m")
    p.add_argument("--fixed-step", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--peer-step", type=float, default=0.1,
                   help="BlackJAX's HMC step size: fixed (blackjax), initial (bjx-*)")
    p.add_argument("--peer-leapfrog", type=int, default=3, help="L of bjx-tempered, bjx-adaptive")
    p.add_argument("--peer-mcmc-steps", type=int, default=1,
                   help="HMC moves per temperature of bjx-*; 0: placed for the budget (adaptive)")
    p.add_argument("--peer-ess", type=float, default=0.0,
                   help="target ESS (fraction) of bjx-adaptive; 0: placed for the budget")
    p.add_argument("--peer-tune", default="shared-step",
                   choices=["shared-step", "step", "mass+shared-step", "mass+step", "none"],
                   help="bjx-* inner-kernel tuning between temperatures")
    p.add_argument("--peer-accept", type=float, default=0.65,
                   help="target acceptance of bjx-*'s step size tuning")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--save-bounds", default=None, metavar="NPZ",
                   help="write every row's per-example bounds (for frontier_summary.py --bounds)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    peers = [c for c in args.candidates if peer_settings(c, args) is not None]
    if peers:
        from benchmarks import _blackjax_peer as peer

        if args.model == "lg":
            raise SystemExit("the BlackJAX peers anneal a decoder model: --model mnist or vae")
        peer.configure_threads(args.threads)  # before jax is imported
        if peer.available() is None:
            raise SystemExit("blackjax: jax/blackjax do not import (pip install blackjax)")
        print(f"peer: {peer.available()}")
    print(f"machine: {machine()}; load {os.getloadavg()[0]:.1f}")
    model, shape = _model(args.model)
    sim = pyrolik.simulate(model, args.examples, data_shape=shape, seed=args.seed)
    if peers:  # both tools anneal the same target: jax's log p(z) + log p(x|z) against Pyro's
        x5, z5 = sim.x[:5].numpy(), sim.latents["z"][:5].numpy()
        err = max(peer.check_target(model, x5, z5),
                  peer.check_target(model, x5, np.random.default_rng(0).standard_normal(
                      z5.shape).astype(np.float32)))
        print(f"peer target = Pyro model's to {err:.1e} (relative, 10 z)")
    rows = []
    splits = ([(k, None, b) for k in args.chains for b in args.totals] if args.totals
              else [(args.chains[0], b, None) for b in args.budgets])
    for name in args.candidates:
        kernel, schedule, init = None, "auto", None
        if name not in peers:
            kw = settings(name)
            schedule = kw.pop("schedule", "auto")
            init = model.guide if kw.pop("encoder", False) else None
            if name == "fixed":
                kw["step_size"] = args.fixed_step
            kernel = make_kernel(kw)
        for chains, budget, total in splits:
            if kernel is None:
                try:
                    measured = run_peer(*peer_settings(name, args), model, sim,
                                        budget or max(1, total // chains), chains, args.seed)
                except (RuntimeError, FloatingPointError) as e:  # the row fails, the command goes on
                    where = f"K={chains:>3} B={total:>6}" if total else f"G={budget:>5}"
                    print(f"{name:>12} {where}: FAILED: {type(e).__name__}: {e}", flush=True)
                    continue
            else:
                measured = run(model, sim, kernel, budget or 0, chains, args.seed, schedule, total,
                               init)
            row = {"candidate": name, "budget": budget or total, "chains": chains, **measured,
                   "total": measured["gradient_evals"] * chains}
            rows.append(row)
            extra = (f" + compile {row['compile_seconds']:.1f} s" if "compile_seconds" in row
                     else "") + (f"; {row['peer']}" if "peer" in row else "")
            where = f"K={chains:>3} B={total:>6}" if total else f"G={budget:>5}"
            print(f"{name:>12} {where}: T={row['num_steps']:>6.1f}, "
                  f"{row['gradient_evals']:8.1f} evals/chain, {row['total']:8.0f} evals/example, "
                  f"gap {row['gap']:7.3f} +- {row['gap_se']:.3f}, {row['seconds']:.1f} s "
                  f"({row['cpu_seconds']:.1f} s CPU)" + extra, flush=True)
    if not args.no_plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        for ax, key, label in ((axes[0], "total" if args.totals else "gradient_evals",
                                "gradient evaluations per " + ("example" if args.totals else "chain")
                                + " (pilot included)"),
                               (axes[1], "seconds", "wall seconds (one thread, compile excluded)")):
            for name in args.candidates:
                mine = [r for r in rows if r["candidate"] == name]
                xs = [r[key] for r in mine]
                # a gap at or below zero is within noise of closed: drawn at its standard error
                ys = [max(r["gap"], r["gap_se"], 1e-3) for r in mine]
                ax.errorbar(xs, ys, yerr=[r["gap_se"] for r in mine], marker="o", capsize=2,
                            label=name)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(label)
        axes[0].set_ylabel("BDMC gap [nats]")
        fig.suptitle(f"{args.model}: {args.examples} simulated examples x {args.chains} chains")
        axes[0].legend(frameon=False, fontsize=8)
        out = HERE / "figures" / f"frontier_{args.model}.png"
        out.parent.mkdir(exist_ok=True)
        fig.tight_layout()
        fig.savefig(out, dpi=120)
        print(f"figure: {out}")
    best = {}
    for r in rows:
        b = best.get(r["budget"])
        if b is None or r["gap"] < b["gap"]:
            best[r["budget"]] = r
    if args.save_bounds:
        np.savez(args.save_bounds, seed=args.seed, model=args.model,
                 **{f"{r['candidate']}@{r['budget']}" + (f"K{r['chains']}" if args.totals else "")
                    + f":{k}": r[k] for r in rows for k in ("lower", "upper")})
    ref = max((r for r in rows if r["candidate"] == "default"), key=lambda r: r["budget"],
              default=None)
    if ref is not None and peers:  # the bounds against pyrolik's largest sandwich, example by example
        mid = 0.5 * (ref["lower"] + ref["upper"])
        print(f"against default's bounds at G={ref['budget']} (mean +- se over examples; a lower "
              f"bound above the upper bound, or an upper below the lower, on average, is biased):")
        for r in rows:
            if r["candidate"] in peers or r["candidate"] == "default":
                d = {k: v for k, v in (("lower - default upper", r["lower"] - ref["upper"]),
                                       ("upper - default lower", r["upper"] - ref["lower"]),
                                       ("lower - midpoint", r["lower"] - mid))}
                print(f"{r['candidate']:>12} G={r['budget']:>5}: " + ", ".join(
                    f"{k} {v.mean():+.3f} +- {v.std() / len(v) ** 0.5:.3f}" for k, v in d.items()))
    print("smallest gap per budget: " + ", ".join(
        f"G={g}: {r['candidate']} {r['gap']:.3f}" for g, r in sorted(best.items())))
    return rows


if __name__ == "__main__":
    main()
