"""Batched probe training: equal to training one by one, and converging to the Bayes loss."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import integrate, stats

from pyrolik.curves import loss_data_curve
from pyrolik.curves.probes import (
    evaluate_probes,
    init_probes,
    make_probe_set,
    probe_logits,
    train_probes,
)
from tests.curves.reference import train_probes_loop


def toy_task(seed, n=80, d=5, k=3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = torch.bucketize(x[:, 0] + 0.5 * torch.randn(n, generator=g), torch.tensor([-0.5, 0.5]))
    return x, y.clamp(max=k - 1)


@pytest.mark.parametrize("probe", ["linear", "mlp"])
@pytest.mark.parametrize("weight_decay", [0.0, 1e-2])
def test_batched_training_equals_one_by_one_loop(probe, weight_decay, seed):
    x, y = toy_task(seed)
    g = torch.Generator().manual_seed(seed)
    # sizes below, at and above the batch size: full batches with padding, and cyclic windows
    probe_set = make_probe_set(len(x), torch.tensor([3, 16, 50]), 2, g)
    init = init_probes(probe, probe_set.seeds, x.shape[1], 3, hidden=7, generator=g)
    kw = dict(num_steps=30, batch_size=16, lr=0.05, weight_decay=weight_decay)
    batched = train_probes(x, y, probe_set, init, **kw)
    looped = train_probes_loop(x, y, probe_set, init, **kw)
    for key in init:
        assert batched[key].shape == init[key].shape
        torch.testing.assert_close(batched[key], looped[key], rtol=1e-9, atol=1e-11)
        # and the training moved every probe
        assert (batched[key] - init[key]).flatten(1).abs().amax(1).min() > 1e-3


def test_probe_set_nests_subsets_and_shares_init_across_sizes(seed):
    g = torch.Generator().manual_seed(seed)
    ps = make_probe_set(30, torch.tensor([5, 10, 30]), 4, g)
    assert ps.sizes.tolist() == [5] * 4 + [10] * 4 + [30] * 4
    assert ps.seeds.tolist() == list(range(4)) * 3
    for s in range(4):
        rows = ps.order[ps.seeds == s]
        assert (rows == rows[0]).all()  # one permutation per seed, whatever the size
        assert sorted(rows[0].tolist()) == list(range(30))
    init = init_probes("mlp", ps.seeds, 6, 3, hidden=4, generator=g)
    assert init["w1"].shape == (12, 4, 6) and init["b2"].shape == (12, 3)
    torch.testing.assert_close(init["w1"][0], init["w1"][8])  # same seed, other size
    assert not torch.equal(init["w1"][0], init["w1"][1])
    assert init["w1"].abs().max() <= 1 / math.sqrt(6) and init["w2"].abs().max() <= 1 / 2


def test_evaluate_probes_matches_per_probe_cross_entropy_in_chunks(seed):
    x, y = toy_task(seed, n=57)
    g = torch.Generator().manual_seed(seed)
    params = init_probes("mlp", torch.arange(4), 5, 3, hidden=6, generator=g)
    loss, acc = evaluate_probes(params, x, y, max_elements=4 * 6 * 10)  # chunks of 10 rows
    for p in range(4):
        logits = probe_logits({k: v[p] for k, v in params.items()}, x.T).T  # (57, K)
        assert loss[p] == pytest.approx(F.cross_entropy(logits, y).item(), rel=1e-12)
        assert acc[p] == pytest.approx((logits.argmax(1) == y).double().mean().item())
        # the same probe as a plain torch.nn MLP
        mlp = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
        with torch.no_grad():
            for layer, key in ((mlp[0], "1"), (mlp[2], "2")):
                layer.weight.copy_(params["w" + key][p])
                layer.bias.copy_(params["b" + key][p])
            torch.testing.assert_close(mlp(x), logits)


def bayes_conditional_entropy(mu: float) -> float:
    """H(Y | X) for y ~ Bernoulli(1/2), x | y ~ N(+-mu, 1), by quadrature: the best loss."""

    def integrand(x):
        p1 = 1 / (1 + math.exp(-2 * mu * x))
        h = -sum(p * math.log(p) for p in (p1, 1 - p1) if p > 0)
        return h * 0.5 * (stats.norm.pdf(x, mu) + stats.norm.pdf(x, -mu))

    return integrate.quad(integrand, -12, 12, epsabs=1e-12)[0]


def test_linear_probe_reaches_the_bayes_loss_on_a_gaussian_task(seed):
    """Known answer: the logistic model is well specified, so L(n) -> H(Y|X) as n grows."""
    mu, n, v = 1.0, 3000, 20000
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n + v,), generator=g)
    x = (2.0 * y - 1) * mu + torch.randn(n + v, generator=g)
    x = torch.stack([x, torch.randn(n + v, generator=g)], 1)  # plus one useless feature
    curve = loss_data_curve(x[:n], y[:n], x[n:], y[n:], sizes=[4, 30, 300, n], num_seeds=3,
                            num_steps=300, batch_size=500, lr=0.05, weight_decay=0.0, seed=seed)
    h = bayes_conditional_entropy(mu)  # 0.3939 nats for mu = 1
    # validation noise of the optimal predictor's mean loss, plus the excess risk of a fitted
    # 3-parameter logistic regression, ~ (d+1) / (2 n) nats
    y_v, x_v = y[n:].double(), x[n:, 0].double()
    ce = F.binary_cross_entropy_with_logits(2 * mu * x_v, y_v, reduction="none")
    se = ce.std().item() / math.sqrt(v)
    assert ce.mean().item() == pytest.approx(h, abs=4 * se)  # the quadrature is right
    top = curve.mean_loss[-1]
    assert h - 4 * se <= top <= h + 4 * se + 3 * 3 / (2 * n)
    assert np.all(np.diff(curve.mean_loss) < 0)  # more data, lower loss
    acc = curve.mean_accuracy[-1]
    assert acc == pytest.approx(stats.norm.cdf(mu), abs=4 * math.sqrt(0.25 / v) + 0.01)
