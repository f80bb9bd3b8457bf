"""The pilot run: a table of step sizes per example on a coarse copy of the schedule, tuned toward
the target acceptance, with the across-chain variance of log f1 - log f0 per pilot temperature."""

from __future__ import annotations

import torch
from pyrolik_models.oracles.linear_gaussian import LinearGaussian

from pyrolik import schedules
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
        state = kernel.transition.init(z, big.value_and_grad)
        accs = []
        for _ in range(10):
            state, info = kernel.transition.step(state, big.value_and_grad, torch.ones(k * n), step, g)
            accs.append(info.acceptance_rate)
        return torch.stack(accs).mean()

    tuned = acceptance(eps.reshape(-1).repeat(k))
    assert 0.75 < tuned < 0.99, tuned
    assert acceptance(torch.full((k * n,), 1.0)) < 0.5  # the default start is far too large here


def test_the_pilot_variance_follows_the_conditional_ess_of_the_cumulative_weights():
    """The schedule is placed by the pilot's variance of r. With unequal weights, the conditional
    ESS of the next increment (Zhou, Johansen & Aston 2016) falls as exp(-delta^2 Var_W[r]): the
    weighted variance, which the table records (times the correction 1 / (1 - sum W^2)); the ESS of
    the increment alone would follow the unweighted variance, which differs."""
    from pyrolik.annealing.tuning import weighted_variance

    g = torch.Generator().manual_seed(0)
    k, n, delta = 40, 3, 1e-3
    r = torch.randn(k, n, generator=g, dtype=torch.float64) * torch.tensor([1.0, 3.0, 0.5])
    lw = 1.5 * torch.randn(k, n, generator=g, dtype=torch.float64) + 0.8 * r  # weights track r
    w = torch.softmax(lw, 0)
    cess = (w * (delta * r).exp()).sum(0) ** 2 / (w * (2 * delta * r).exp()).sum(0)  # / K
    implied = -torch.log(cess) / delta**2
    var = weighted_variance(r, lw)
    torch.testing.assert_close(var * (1 - (w * w).sum(0)), implied, rtol=1e-2, atol=0)
    increment_only = -torch.log((delta * r).exp().mean(0) ** 2 / (2 * delta * r).exp().mean(0))
    assert ((increment_only / delta**2 - implied).abs() > 0.1 * implied).all()
    # equal weights: the unbiased variance, as before
    torch.testing.assert_close(weighted_variance(r, torch.zeros(k, n, dtype=torch.float64)),
                               r.var(0))
    assert weighted_variance(r[:1], lw[:1]).isnan().all()  # one chain: no variance
