"""AIS+encoder / AIS from the prior, time per annealing step: 5 alternating pairs on the MNIST-size
decoder (50-200-200-784) with a mean-field encoder of the same size, 100 examples x 10 chains, 20 steps,
fixed step size, 1 thread. Run from the repository root (or any checkout of it, to compare versions):

    PYTHONPATH=. python benchmarks/encoder_ratio.py LABEL
"""
import sys, time, torch
sys.path.insert(0, "benchmarks"); sys.path.insert(0, ".")
torch.set_num_threads(1)
import pyrolik
from _common import decoder, encoder_guide, pyro_model
g = torch.Generator().manual_seed(0)
dec = decoder(); model = pyro_model(dec); guide = encoder_guide()
x = (torch.rand(100, 784, generator=g) < 0.13).float()
def per_step(init):
    k = pyrolik.HMC(num_leapfrog=10, step_size=0.05, adapt=None)
    t0 = time.perf_counter()
    pyrolik.ais(model, x, num_steps=20, num_chains=10, kernel=k, init=init, seed=0, progress=False)
    return (time.perf_counter() - t0) / 20
per_step(guide); per_step(None)
r = []
for i in range(5):
    a, b = (per_step(guide), per_step(None)) if i % 2 == 0 else reversed((per_step(None), per_step(guide)))
    r.append(a / b)
print(sys.argv[1] if len(sys.argv) > 1 else "this checkout", "encoder/prior per step:", " ".join(f"{v:.2f}" for v in sorted(r)), "median", f"{sorted(r)[2]:.2f}")
