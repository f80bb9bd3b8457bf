"""The pilot run: a table of step sizes per example on a coarse copy of the schedule, tuned toward
the target acceptance, with the across-chain variance of log f1 - log f0 per pilot temperature."""

from __future__ import annotations

import torch
from pyrolik_models.oracles.linear_gaussian import LinearGaussian

from pyrolik.annealing import schedules
from pyrolik.annealing.driver import run_pilot
from pyrolik.annealing.kernel import HMC
from pyrolik.model.target import make_target


def _pilot(lg, x, kernel, num_steps=100, k=8):
    target = make_target(lg, x, k)
    path = target.path("prior")
    g = torch.Generator().manual_seed(0)
    schedule = schedules.sigmoid(num_steps)
    table = run_pilot(kernel.adaptation, path, kernel.transition, schedule, g)
    return path, table, schedule


def test_the_table_covers_the_schedule_on_a_coarse_grid():
    lg = LinearGaussian.random(data_dim=4, latent_dim=2, s=0.5, seed=0)
    x = lg.sample(3, torch.Generator().manual_seed(1))
    kernel = HMC()
    _, table, schedule = _pilot(lg, x, kernel)
    p = len(table.betas)
    assert table.betas[0] == 0 and table.betas[-1] == 1 and 2 < p < len(schedule)
    assert set(table.betas.tolist()) <= set(schedule.tolist())  # a coarse copy, not new betas
    assert table.log_step_size.shape == (p, 3) and torch.isfinite(table.log_step_size).all()
    assert table.log_ratio_var.shape == (p, 3) and (table.log_ratio_var[1:] > 0).all()
    assert table.inv_mass is None


def test_the_tuned_step_size_reaches_the_target_acceptance_at_the_posterior():
    """Started from exact posterior draws at beta = 1, the table's step size accepts at about the
    pilot's target (0.9 by default), where the initial step size does not."""
    lg = LinearGaussian.random(data_dim=4, latent_dim=2, s=0.2, seed=0)  # a narrow posterior
    x = lg.sample(2, torch.Generator().manual_seed(1))
    kernel = HMC(step_jitter=0.0)
    path, table, _ = _pilot(lg, x, kernel, k=8)
    k, n = 64, 2
    big = make_target(lg, x, k).path("prior")
    post = lg.tempered_posterior(x, 1.0).sample((k,))  # (k, n, d)
    z = post.reshape(k * n, -1)
    eps, _ = table.at(torch.ones(1))
    g = torch.Generator().manual_seed(2)

    def acceptance(step):
        state = kernel.init(z, big.value_and_grad)
        accs = []
        for _ in range(10):
            state, info = kernel.step(state, big.value_and_grad, torch.ones(k * n), step, g)
            accs.append(info.acceptance_rate)
        return torch.stack(accs).mean()

    tuned = acceptance(eps.reshape(-1).repeat(k))
    assert 0.75 < tuned < 0.99, tuned
    assert acceptance(torch.full((k * n,), 1.0)) < 0.5  # the default start is far too large here
