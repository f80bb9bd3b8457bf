"""Batched training of classification probes: each (n, seed) probe a slice of one model."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["PROBES", "ProbeSet", "make_probe_set", "init_probes", "probe_logits", "train_probes",
           "evaluate_probes"]

PROBES = ("linear", "mlp")


class ProbeSet(NamedTuple):
    """Probe ``p`` trains on ``order[p, :sizes[p]]``; ``p = size_index * num_seeds + seed``."""

    sizes: Tensor  # (P,) long, the training-set size n_p
    seeds: Tensor  # (P,) long, the seed index s_p (shared init and data order across sizes)
    order: Tensor  # (P, N) long, seed s_p's permutation of the pool


def make_probe_set(num_pool: int, sizes: Tensor, num_seeds: int,
                   generator: torch.Generator | None = None) -> ProbeSet:
    """A permutation of the pool per seed; subsets nested across sizes (common random numbers)."""
    perms = torch.argsort(torch.rand(num_seeds, num_pool, generator=generator), dim=1)
    sizes = torch.as_tensor(sizes, dtype=torch.long)
    size_of = sizes.repeat_interleave(num_seeds)
    seed_of = torch.arange(num_seeds).repeat(len(sizes))
    return ProbeSet(size_of, seed_of, perms[seed_of])


def init_probes(probe: str, seeds: Tensor, in_dim: int, num_classes: int, *, hidden: int = 64,
                generator: torch.Generator | None = None, dtype: torch.dtype | None = None
                ) -> dict[str, Tensor]:
    """Stacked initial parameters (``nn.Linear``'s layout and bounds), one per seed, per probe."""
    dtype = dtype or torch.get_default_dtype()
    num_seeds = int(seeds.max()) + 1
    k = num_classes
    shapes = ({"w": (k, in_dim), "b": (k,)} if probe == "linear" else
              {"w1": (hidden, in_dim), "b1": (hidden,), "w2": (k, hidden), "b2": (k,)})
    fan_in = {"w": in_dim, "b": in_dim, "w1": in_dim, "b1": in_dim, "w2": hidden, "b2": hidden}
    params = {}
    for key, shape in shapes.items():  # a loop over the 2 or 4 tensors, not over probes
        bound = 1.0 / math.sqrt(fan_in[key])
        u = torch.rand((num_seeds, *shape), generator=generator, dtype=dtype)
        params[key] = ((2 * u - 1) * bound)[seeds]
    return params


def probe_logits(params: dict[str, Tensor], xt: Tensor) -> Tensor:
    """Class-major logits ``(P, K, B)`` of all probes from transposed inputs ``xt`` ``(P, d, B)`` or
    ``(d, B)`` (the layout ``F.cross_entropy`` handles fastest on CPU)."""
    if "w" in params:
        return torch.matmul(params["w"], xt) + params["b"].unsqueeze(-1)
    h = torch.relu(torch.matmul(params["w1"], xt) + params["b1"].unsqueeze(-1))
    return torch.matmul(params["w2"], h) + params["b2"].unsqueeze(-1)


def train_probes(x: Tensor, y: Tensor, probe_set: ProbeSet, init: dict[str, Tensor], *,
                 num_steps: int, batch_size: int, lr: float, weight_decay: float = 0.0
                 ) -> dict[str, Tensor]:
    """Train all probes at once with Adam; returns the trained stacked parameters."""
    params = {k: v.detach().clone().requires_grad_(True) for k, v in init.items()}
    opt = torch.optim.Adam(list(params.values()), lr=lr, weight_decay=weight_decay, fused=True)
    n = probe_set.sizes.unsqueeze(1).to(x.device)  # (P, 1)
    order = probe_set.order.to(x.device)
    b = min(batch_size, int(n.max()))
    j = torch.arange(b, device=x.device)
    is_full = n <= b
    mask = (j < n).to(x.dtype)  # (P, b): padding rows of the full-batch probes are 0
    denom = n.clamp(max=b).squeeze(1).to(x.dtype)
    # One buffer for the gathered batches, reused every step: allocating a fresh (P*b, d) tensor
    # costs page faults that made the gather 10x slower than the copy itself (MNIST, 40 MB).
    buf = torch.empty(n.shape[0] * b, x.shape[1], dtype=x.dtype, device=x.device)
    for step in range(num_steps):
        pos = torch.where(is_full, j, (step * b + j) % n)
        idx = order.gather(1, pos).flatten()
        torch.index_select(x, 0, idx, out=buf)
        xt = buf.view(*pos.shape, -1).transpose(1, 2)  # (P, d, b)
        logits = probe_logits(params, xt)  # (P, K, b)
        ce = F.cross_entropy(logits, y.index_select(0, idx).view_as(pos), reduction="none")
        loss = ((ce * mask).sum(1) / denom).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return {k: v.detach() for k, v in params.items()}


def evaluate_probes(params: dict[str, Tensor], x: Tensor, y: Tensor, *, max_elements: int = 2**22
                    ) -> tuple[Tensor, Tensor]:
    """Each probe's validation cross-entropy (nats) and accuracy, ``max_elements`` at a time."""
    num_probes = next(iter(params.values())).shape[0]
    width = max(v.shape[-1] for v in params.values())
    chunk = max(1, max_elements // (num_probes * width))
    total = torch.zeros(num_probes, dtype=x.dtype, device=x.device)
    correct = torch.zeros(num_probes, dtype=x.dtype, device=x.device)
    with torch.no_grad():
        for start in range(0, len(x), chunk):  # a loop over validation chunks, not probes
            xb, yb = x[start : start + chunk], y[start : start + chunk]
            logits = probe_logits(params, xb.T)  # (P, K, c)
            yp = yb.expand(num_probes, -1)
            total += F.cross_entropy(logits, yp, reduction="none").sum(1)
            correct += (logits.argmax(1) == yp).to(x.dtype).sum(1)
    return total / len(x), correct / len(x)
