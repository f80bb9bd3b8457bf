"""The reference of the batched probes: a plain loop over them, written out."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from pyrolik.curves.probes import ProbeSet


def train_probes_loop(x: Tensor, y: Tensor, probe_set: ProbeSet, init: dict[str, Tensor], *,
                      num_steps: int, batch_size: int, lr: float, weight_decay: float = 0.0
                      ) -> dict[str, Tensor]:
    """Train the probes one by one (same init, data order, optimiser and steps as
    ``pyrolik.curves.probes.train_probes``): its oracle here and its baseline in
    ``benchmarks/bench_curves.py``."""
    out: dict[str, list[Tensor]] = {k: [] for k in init}
    for p in range(len(probe_set.sizes)):
        n = int(probe_set.sizes[p])
        own = probe_set.order[p, :n].to(x.device)
        xp, yp = x[own], y[own]
        prm = {k: v[p].detach().clone().requires_grad_(True) for k, v in init.items()}
        opt = torch.optim.Adam(list(prm.values()), lr=lr, weight_decay=weight_decay, fused=True)
        full = torch.arange(n, device=x.device)
        window = torch.arange(min(batch_size, n), device=x.device)
        for step in range(num_steps):
            pos = full if n <= batch_size else (step * batch_size + window) % n
            h = F.relu(F.linear(xp[pos], prm["w1"], prm["b1"])) if "w1" in prm else xp[pos]
            logits = F.linear(h, prm["w"] if "w" in prm else prm["w2"], prm.get("b", prm.get("b2")))
            loss = F.cross_entropy(logits, yp[pos])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        for k, v in prm.items():
            out[k].append(v.detach())
    return {k: torch.stack(v) for k, v in out.items()}
