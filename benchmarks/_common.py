"""Shared pieces of the speed benchmarks: the 50-200-200-784 Bernoulli decoder, timers."""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable

import pyro
import pyro.distributions as dist
import torch
from torch import nn


def decoder(latent: int = 50, hidden: int = 200, pixels: int = 784, seed: int = 0) -> nn.Module:
    """The binarized-MNIST VAE decoder of Burda et al. / Wu et al. (ELU, Bernoulli logits)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(latent, hidden), nn.ELU(), nn.Linear(hidden, hidden), nn.ELU(),
                         nn.Linear(hidden, pixels)).eval()


def pyro_model(dec: nn.Module, latent: int = 50):
    """The same decoder as an ordinary Pyro program (the model convention of the README)."""

    def model(x):
        d = pyro.module("decoder", dec)
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(latent), 1.0).to_event(1))
            pyro.sample("x", dist.Bernoulli(logits=d(z)).to_event(1), obs=x)

    return model


def encoder_guide(latent: int = 50, hidden: int = 200, pixels: int = 784, seed: int = 1):
    """A mean-field Gaussian encoder guide q(z | x) of the same size as the decoder (AIS+encoder)."""
    torch.manual_seed(seed)
    enc = nn.Sequential(nn.Linear(pixels, hidden), nn.ELU(), nn.Linear(hidden, hidden), nn.ELU(),
                        nn.Linear(hidden, 2 * latent)).eval()

    def guide(x):
        e = pyro.module("encoder", enc)
        with pyro.plate("data", x.shape[0]):
            h = e(x)
            scale = nn.functional.softplus(h[:, latent:]) + 1e-3
            pyro.sample("z", dist.Normal(h[:, :latent], scale).to_event(1))

    return guide


def hand_value_and_grad(dec: nn.Module, x: torch.Tensor) -> Callable[[torch.Tensor], tuple]:
    """log p(z), log p(x|z) and both gradients, written by hand in plain torch: the floor."""
    log2pi = torch.log(torch.tensor(2 * torch.pi, dtype=x.dtype))

    def fn(z):
        with torch.enable_grad():
            z = z.detach().requires_grad_(True)
            logits = dec(z)
            lo = -nn.functional.binary_cross_entropy_with_logits(logits, x, reduction="none").sum(-1)
            lp = -0.5 * (z * z).sum(-1) - 0.5 * z.shape[-1] * log2pi
            (g_lo,) = torch.autograd.grad(lo.sum(), z)
        return lp.detach(), lo.detach(), -z.detach(), g_lo

    return fn


def median_time(fn: Callable[[], object], repeats: int = 20, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(fns: dict[str, Callable[[], object]], repeats: int = 20, warmup: int = 3
                ) -> dict[str, float]:
    """Median seconds per call of each function, timed in alternation (fair under shared load)."""
    for f in fns.values():
        for _ in range(warmup):
            f()
    times: dict[str, list[float]] = {k: [] for k in fns}
    order = list(fns)
    for _ in range(repeats):
        order.reverse()  # alternate, so that no function always runs first or after the same one
        for k in order:
            f = fns[k]
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def machine() -> str:
    return (f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads, "
            f"{'CUDA ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}")


def add_repeat_option(p) -> None:
    """``--repeat N`` of the cost benchmarks (a search + final call against the final call alone)."""
    p.add_argument("--repeat", type=int, default=1,
                   help="time the pair (search + final, final alone) this many times: the median "
                        "CPU ratio (a shared machine's noise moves one pair by up to 10%%)")


def repeated_cpu_ratio(first: float, searched: Callable[[], object], final: Callable[[], object],
                       repeat: int) -> float:
    """The median CPU-time ratio of ``searched()`` to ``final()`` over ``repeat`` pairs, ``first``
    (the pair already timed) and ``repeat - 1`` more, printed with every pair's ratio."""
    import warnings

    ratios = [first]
    for _ in range(repeat - 1):
        c0 = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            searched()
        c1 = time.process_time()
        final()
        ratios.append((c1 - c0) / (time.process_time() - c1))
    if repeat > 1:
        print(f"cpu ratio over {repeat} pairs: median {statistics.median(ratios):.3f} "
              f"({', '.join(f'{v:.3f}' for v in ratios)})")
    return statistics.median(ratios)
