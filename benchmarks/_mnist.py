"""Shared pieces of the MNIST reproduction benchmarks (issue 10): data lookup, checkpoints, claims."""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import torch

from pyrolik.io.datasets import find_data_dir

__all__ = ["CHECKPOINTS", "FIGURES", "Claims", "data_dir_or_exit", "load_or_train", "paired",
           "peak_rss_mb", "load_avg", "mean_se"]

HERE = Path(__file__).resolve().parent
CHECKPOINTS = HERE / "checkpoints"
FIGURES = HERE / "figures"


def data_dir_or_exit(arg: str | None, filename: str) -> Path:
    """The data directory from ``arg`` or $PYROLIK_DATA; exit 0 with a message when it is absent."""
    found = find_data_dir(arg, filename)
    if found is None:
        print(f"SKIP: {filename} not found in {arg!r} or $PYROLIK_DATA="
              f"{os.environ.get('PYROLIK_DATA')!r}; pass the data directory as the first argument")
        sys.exit(0)
    return found


def load_or_train(name: str, path: Path, data_dir: Path, train_args: list[str]):
    """Load the checkpoint at ``path`` (training it with models.training.train_mnist first if absent)."""
    from models import load
    from models.training.train_mnist import main as train_main
    from models.zoo import PRESETS

    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"training {name} -> {path} ({' '.join(train_args)})", flush=True)
        train_main([name, "--data-dir", str(data_dir), "--out", str(path), *train_args])
    return load(PRESETS[name][0], path, dtype=torch.float32)


def mean_se(v: torch.Tensor) -> tuple[float, float]:
    """Mean over examples and its standard error."""
    v = v.detach().double()
    return float(v.mean()), float(v.std() / len(v) ** 0.5) if len(v) > 1 else float("nan")


def paired(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """Mean of a - b over the same examples and its standard error."""
    return mean_se(a - b)


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MiB, Linux ru_maxrss is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load_avg() -> str:
    one, five, _ = os.getloadavg()
    return f"{os.cpu_count()} cores, load average {one:.1f} (1 min) {five:.1f} (5 min)"


class Claims:
    """Collects the qualitative claims a script checks; ``finish()`` exits non-zero if one failed."""

    def __init__(self) -> None:
        self.results: list[tuple[str, bool]] = []
        self.start = time.perf_counter()

    def check(self, text: str, ok: bool) -> bool:
        self.results.append((text, bool(ok)))
        print(f"CLAIM {'PASS' if ok else 'FAIL'}: {text}", flush=True)
        return ok

    def finish(self) -> None:
        failed = [t for t, ok in self.results if not ok]
        print(f"wall time {time.perf_counter() - self.start:.0f} s; peak RSS {peak_rss_mb():.0f} MiB; "
              f"{load_avg()}")
        if failed:
            print(f"{len(failed)} claim(s) failed")
            sys.exit(1)
        print("all claims hold")
