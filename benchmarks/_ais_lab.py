r"""Scratch AIS/BDMC loop for the issue-17 prototypes (not imported by pyrolik; benchmarks only).

A minimal batched AIS over rows = chains x examples (chain-major, as pyrolik), with an HMC transition
whose step size, inverse mass and number of leapfrog steps are given *per annealing step* by a
frozen plan, so that kernels, pilots and schedules can be compared at equal gradient budgets before
they go into the library. Records, per step, what the diagnosis needs: acceptance, squared jump
distance in z and in r = log p(x | z), and the mean of r (the forward/reverse hysteresis whose area
is the BDMC gap).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from pyrolik.model.target import ValueAndGrad, make_target


class State:
    __slots__ = ("z", "li", "lr", "gi", "gr")

    def __init__(self, z: Tensor, vg: ValueAndGrad):
        self.z, self.li, self.lr, self.gi, self.gr = z, vg.log_init, vg.log_ratio, vg.grad_init, \
            vg.grad_ratio

    def logp(self, beta: Tensor) -> Tensor:
        return self.li + beta * self.lr

    def grad(self, beta: Tensor) -> Tensor:
        return self.gi + beta.unsqueeze(-1) * self.gr

    def where(self, keep: Tensor, other: State) -> State:
        out = State.__new__(State)
        k1 = keep.unsqueeze(-1)
        out.z = torch.where(k1, other.z, self.z)
        out.li = torch.where(keep, other.li, self.li)
        out.lr = torch.where(keep, other.lr, self.lr)
        out.gi = torch.where(k1, other.gi, self.gi)
        out.gr = torch.where(k1, other.gr, self.gr)
        return out


def hmc_step(fn, s: State, beta: Tensor, eps: Tensor, inv_mass: Tensor | None, L: int,
             gen: torch.Generator):
    """One HMC transition at per-row ``beta``/``eps`` with ``L`` leapfrog steps (L evaluations)."""
    z = s.z
    noise = torch.randn(z.shape, generator=gen, dtype=z.dtype)
    im = 1.0 if inv_mass is None else inv_mass
    p = noise if inv_mass is None else noise * inv_mass.rsqrt()
    k0 = 0.5 * (p * p * im).sum(-1)
    h0 = -s.logp(beta) + k0
    e = eps.unsqueeze(-1)
    p = p + 0.5 * e * s.grad(beta)
    cur = s
    for i in range(L):
        zn = cur.z + e * im * p
        cur = State(zn, fn(zn))
        p = p + (0.5 if i == L - 1 else 1.0) * e * cur.grad(beta)
    h1 = -cur.logp(beta) + 0.5 * (p * p * im).sum(-1)
    err = h1 - h0
    ok = torch.isfinite(err) & (err < 1000)
    log_a = torch.where(ok, -err, torch.full_like(err, -math.inf)).clamp_max(0)
    u = torch.rand(err.shape, generator=gen, dtype=z.dtype)
    acc = torch.log(u) < log_a
    new = s.where(acc, cur)
    return new, log_a.exp(), cur


@dataclass
class Plan:
    """A frozen per-step plan: ``eps_fn(t, beta_rows) -> (rows,)`` step sizes, ``inv_mass_fn`` and
    the number of leapfrog steps ``L_fn(t) -> int`` (may be random but independent of the chains)."""

    eps_fn: Callable[[int, Tensor], Tensor]
    L_fn: Callable[[int], int] = lambda t: 10
    inv_mass_fn: Callable[[int, Tensor], Tensor | None] = lambda t, b: None
    eps_jitter: float = 0.0  # eps * U(1 - j, 1 + j) per row and step
    name: str = ""


@dataclass
class Run:
    log_w: Tensor  # (rows,) float64
    grads: int  # evaluations per row (leapfrog steps summed), estimating run only
    acc: Tensor  # (T, rows)
    jump_z: Tensor  # (T, rows) ||z' - z||^2
    jump_r: Tensor  # (T, rows) (r' - r)^2
    mean_r: Tensor  # (T+1, rows) r at the start of each step's update (before move)
    eps: Tensor  # (T, rows)
    extra: dict = field(default_factory=dict)


def anneal(fn, z0: Tensor, betas: Tensor, plan: Plan, gen: torch.Generator,
           record: bool = True) -> Run:
    """AIS along ``betas`` (T+1, rows): log w += (b_t - b_{t-1}) r(z); then move at b_t."""
    s = State(z0, fn(z0))
    betas = betas.to(z0)
    rows = z0.shape[0]
    T = betas.shape[0] - 1
    log_w = torch.zeros(rows, dtype=torch.float64)
    acc, jz, jr, mr, ee = [], [], [], [s.lr], []
    grads = 0
    for t in range(1, T + 1):
        b0, b = betas[t - 1], betas[t]
        log_w = log_w + ((b - b0) * s.lr).double()
        eps = plan.eps_fn(t, b)
        if plan.eps_jitter:
            u = torch.rand(rows, generator=gen, dtype=z0.dtype)
            eps = eps * (1 - plan.eps_jitter + 2 * plan.eps_jitter * u)
        L = plan.L_fn(t)
        new, a, _ = hmc_step(fn, s, b, eps, plan.inv_mass_fn(t, b), L, gen)
        grads += L
        if record:
            acc.append(a)
            jz.append(((new.z - s.z) ** 2).sum(-1))
            jr.append((new.lr - s.lr) ** 2)
            mr.append(new.lr)
            ee.append(eps)
        s = new
    st = (lambda v: torch.stack(v)) if record else (lambda v: None)
    return Run(log_w, grads, st(acc), st(jz), st(jr), st(mr), st(ee), {"state": s})


def lme(lw: Tensor, k: int) -> Tensor:
    """log-mean-exp over the k chains of (k*n,) chain-major log-weights -> (n,)."""
    v = lw.reshape(k, -1)
    return torch.logsumexp(v, 0) - math.log(k)


def bdmc(model, x: Tensor, z_post: Tensor, k: int, betas: Tensor, plan: Plan, seed: int,
         fwd_start: Tensor | None = None) -> dict:
    """Forward and reverse AIS stacked in one pass of 2k chains per example.

    ``betas`` is (T+1,) (shared) or (T+1, n) (per example). ``z_post``: (n, d) exact posterior draws.
    Returns lower/upper per example, the gap, the runs' records.
    """
    n = x.shape[0]
    target = make_target(model, x, 2 * k)
    gen = torch.Generator().manual_seed(seed)

    def fn(z):
        return target.value_and_grad(z, "prior")

    if fwd_start is None:
        fwd_start = target.first_chains(k).sample_prior(gen).u
    z0 = torch.cat([fwd_start, z_post.repeat(k, 1)])
    if betas.dim() == 1:
        betas = betas.unsqueeze(-1).expand(-1, n)
    col = betas.repeat(1, k)  # (T+1, k*n)
    both = torch.cat([col, col.flip(0)], 1)
    run = anneal(fn, z0, both, plan, gen)
    kn = k * n
    lower = lme(run.log_w[:kn], k)
    upper = -lme(run.log_w[kn:], k)
    return {"lower": lower, "upper": upper, "gap": float((upper - lower).mean()),
            "gap_se": float((upper - lower).std() / n ** 0.5), "run": run, "kn": kn}


def fixed(eps: float, L: int = 10) -> Plan:
    return Plan(lambda t, b: torch.full_like(b, eps), lambda t: L, name=f"fixed eps={eps} L={L}")


def pilot(model, x: Tensor, kp: int, betas: Tensor, *, target_accept: float = 0.9,
          jitter: float = 0.0, warmup: int = 10, per_temp: int = 1, gain: float = 1.0,
          eps0: float = 0.1, seed: int = 5, smooth: int = 5, mass: bool = False,
          shrink: float = 5.0, num_leapfrog: int = 10) -> dict:
    """A pilot of ``kp`` chains per example along the coarse ``betas`` (P,): per example and
    temperature, log step sizes adapted toward ``target_accept`` (under the same eps jitter as the
    run) and the across-chain variance of r = log p(x | z). Costs ``(warmup + per_temp * P) * L``
    gradient evaluations per pilot chain."""
    n = x.shape[0]
    target = make_target(model, x, kp)
    gen = torch.Generator().manual_seed(seed)

    def fn(z):
        return target.value_and_grad(z, "prior")

    z0 = target.sample_prior(gen).u
    s = State(z0, fn(z0))
    log_eps = z0.new_full((n,), math.log(eps0))
    logs, var, mean, accs, masses = [], [], [], [], []
    transitions = 0

    def inv_mass_now(z):
        zz = z.reshape(kp, n, -1)
        v = zz.var(0)  # (n, d)
        pooled = v.mean(0, keepdim=True)
        return (kp * v + shrink * pooled) / (kp + shrink)

    for j, b in enumerate(betas.tolist()):
        reps = warmup if j == 0 else per_temp
        hist = []
        var.append(s.lr.reshape(kp, n).var(0))
        mean.append(s.lr.reshape(kp, n).mean(0))
        acc_b = []
        for _ in range(reps):
            im = inv_mass_now(s.z).repeat(kp, 1) if mass else None
            eps = log_eps.exp().repeat(kp)
            if jitter:
                u = torch.rand(kp * n, generator=gen, dtype=z0.dtype)
                eps = eps * (1 - jitter + 2 * jitter * u)
            s, a, _ = hmc_step(fn, s, z0.new_full((kp * n,), b), eps, im, num_leapfrog, gen)
            transitions += 1
            a = a.reshape(kp, n).mean(0)
            acc_b.append(a)
            log_eps = log_eps + gain * (a - target_accept)
            hist.append(log_eps)
        logs.append(torch.stack(hist[len(hist) // 2:]).mean(0))
        if mass:
            masses.append(inv_mass_now(s.z))
        accs.append(torch.stack(acc_b).mean(0))
    log_t = torch.stack(logs)
    if smooth and len(log_t) >= smooth:
        pad = smooth // 2
        padded = torch.cat([log_t[:1].expand(pad, -1), log_t, log_t[-1:].expand(pad, -1)])
        log_t = padded.unfold(0, smooth, 1).mean(-1)
    mass_t = None
    if mass:
        lm = torch.stack(masses).log()
        if smooth and len(lm) >= smooth:
            pad = smooth // 2
            padded = torch.cat([lm[:1].expand(pad, -1, -1), lm, lm[-1:].expand(pad, -1, -1)])
            lm = padded.unfold(0, smooth, 1).mean(-1)
        mass_t = lm
    return {"betas": betas.to(z0), "log_eps": log_t, "log_inv_mass": mass_t, "var_r": torch.stack(var),
            "mean_r": torch.stack(mean), "acc": torch.stack(accs), "transitions": transitions,
            "grads_per_example": transitions * num_leapfrog * kp}


def table_eps_fn(betas: Tensor, log_eps: Tensor, n: int):
    """eps_fn for a plan: log step sizes (P, n) interpolated linearly in beta, per row's example."""
    def eps_fn(t, b):
        ex = torch.arange(b.shape[0]) % n
        hi = torch.searchsorted(betas, b.contiguous()).clamp(1, len(betas) - 1)
        lo = hi - 1
        w = ((b - betas[lo]) / (betas[hi] - betas[lo])).clamp(0, 1)
        return torch.exp((1 - w) * log_eps[lo, ex] + w * log_eps[hi, ex])
    return eps_fn


def table_mass_fn(betas: Tensor, log_m: Tensor, n: int):
    """inv_mass_fn for a plan: log inverse masses (P, n, d) interpolated in beta, per row."""
    def fn(t, b):
        ex = torch.arange(b.shape[0]) % n
        hi = torch.searchsorted(betas, b.contiguous()).clamp(1, len(betas) - 1)
        lo = hi - 1
        w = ((b - betas[lo]) / (betas[hi] - betas[lo])).clamp(0, 1).unsqueeze(-1)
        return torch.exp((1 - w) * log_m[lo, ex] + w * log_m[hi, ex])
    return fn


def speed_schedule(betas: Tensor, sd: Tensor, num_steps: int, floor: float = 0.0) -> Tensor:
    r"""Betas at constant thermodynamic speed: density proportional to ``sd`` (P,) (or (P, n): one
    schedule per example, returned (T+1, n)), sd interpolated linearly between the pilot's betas.
    ``floor`` mixes in a uniform density (fraction of steps spread evenly)."""
    betas = betas.double()
    sd = sd.double()
    squeeze = sd.dim() == 1
    if squeeze:
        sd = sd.unsqueeze(-1)
    seg = 0.5 * (sd[1:] + sd[:-1]) * (betas[1:] - betas[:-1]).unsqueeze(-1)  # (P-1, n)
    cum = torch.cat([torch.zeros_like(seg[:1]), seg.cumsum(0)])
    cum = cum / cum[-1]
    if floor:
        cum = (1 - floor) * cum + floor * betas.unsqueeze(-1)
    u = torch.linspace(0, 1, num_steps + 1, dtype=torch.float64)
    out = []
    for i in range(cum.shape[1]):
        c = cum[:, i]
        # piecewise-linear inverse of the cumulative (exact inverse would need the quadratic)
        idx = torch.searchsorted(c, u).clamp(1, len(c) - 1)
        w = ((u - c[idx - 1]) / (c[idx] - c[idx - 1]).clamp_min(1e-300)).clamp(0, 1)
        out.append(betas[idx - 1] + w * (betas[idx] - betas[idx - 1]))
    res = torch.stack(out, 1)
    res[0], res[-1] = 0.0, 1.0
    return res[:, 0] if squeeze else res
