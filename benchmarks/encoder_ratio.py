"""AIS+encoder / AIS from the prior, time per annealing step.

Five alternating pairs on the MNIST-size decoder (50-200-200-784) with a mean-field encoder of the
same size, 100 examples x 10 chains, 20 steps, fixed step size, 1 thread; prints the sorted ratios
and their median. Run it in any checkout to compare versions side by side:

    PYTHONPATH=. python benchmarks/encoder_ratio.py LABEL
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import torch  # noqa: E402
from _common import decoder, encoder_guide, pyro_model  # noqa: E402
from bench_ais import ais_per_step  # noqa: E402


def main(label: str = "this checkout", pairs: int = 5) -> None:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    model, guide = pyro_model(decoder()), encoder_guide()
    x = (torch.rand(100, 784, generator=g) < 0.13).float()

    def per_step(init):  # bench_ais's timing: fixed step 0.05, L = 10
        return ais_per_step(model, x, 20, 10, 10, init=init)

    per_step(guide), per_step(None)  # warm-up: recordings, imports
    ratios = []
    for i in range(pairs):  # alternate which runs first, so that a change of load cancels
        if i % 2 == 0:
            enc, prior = per_step(guide), per_step(None)
        else:
            prior, enc = per_step(None), per_step(guide)
        ratios.append(enc / prior)
    ratios.sort()
    print(f"{label}: AIS+encoder / AIS from the prior per step: "
          f"{' '.join(f'{r:.2f}' for r in ratios)}; median {ratios[len(ratios) // 2]:.2f}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
