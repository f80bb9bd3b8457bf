"""The annealing engine on its own: the pure step, the loop and its hooks (pyrolik.annealing.engine)."""

from __future__ import annotations

import pytest
import torch
from pyrolik_models import LinearGaussian

from pyrolik.annealing import engine
from pyrolik.annealing.kernel import HMC
from pyrolik.annealing.step_sizes import StepSizes, rows_of
from pyrolik.annealing.tuning import Fixed, TableTuning
from pyrolik.model.target import make_target


@pytest.fixture
def lg():
    return LinearGaussian.random(data_dim=4, latent_dim=2, s=0.5, seed=1)


def test_the_weight_increment_is_the_formula(lg, seed):
    """log w' = log w + (beta' - beta) * (log f1 - log f0)(z), z the state *before* the move."""
    x = lg.sample(3, torch.Generator().manual_seed(seed))
    path = make_target(lg, x, 4).path("prior")
    g = torch.Generator().manual_seed(seed)
    z = path.sample_initial(g)
    kernel = HMC(num_leapfrog=3).transition
    state = engine.init(z, path.value_and_grad, kernel, torch.full((12,), 0.25),
                        Fixed(0.1).tuning(None, 4, 3, z))
    state = state._replace(log_weight=torch.randn(12, dtype=torch.float64, generator=g))
    beta_next = torch.linspace(0.3, 0.9, 12)
    new, info = engine.step(state, beta_next, kernel=kernel,
                            density=path.value_and_grad, generator=g)
    expected = state.log_weight + ((beta_next - 0.25) * lg_log_obs(lg, x, z)).double()
    torch.testing.assert_close(new.log_weight, expected, rtol=0, atol=1e-12)
    assert torch.equal(new.beta, beta_next)
    torch.testing.assert_close(info.step_size, torch.full((12,), 0.1))
    assert info.energy_error.shape == (12,) and info.is_divergent.dtype == torch.bool


def lg_log_obs(lg, x, z):
    """log p(x | z) of the linear-Gaussian decoder, rows chain-major."""
    n = x.shape[0]
    xr = x.repeat(z.shape[0] // n, 1)
    return torch.distributions.Normal(z @ lg.W.T + lg.b, lg.s).log_prob(xr).sum(-1)


@pytest.mark.statistical
@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_one_step_leaves_the_tempered_posterior_invariant(lg, beta, seed):
    """From exact draws of f_beta, a step to the same beta keeps its moments (4 SE) and w fixed."""
    x = lg.sample(1, torch.Generator().manual_seed(seed))
    k = 20_000
    path = make_target(lg, x, k).path("prior")
    g = torch.Generator().manual_seed(seed)
    post = lg.tempered_posterior(x, beta)
    z0 = post.loc + torch.randn(k, 2, generator=g) @ post.scale_tril[0].T
    b = torch.full((k,), beta)
    kernel = HMC(num_leapfrog=5).transition
    state = engine.init(z0, path.value_and_grad, kernel, b, Fixed(0.3).tuning(None, k, 1, z0))
    new, info = engine.step(state, b, kernel=kernel, density=path.value_and_grad, generator=g)
    assert torch.equal(new.log_weight, state.log_weight)  # no change of temperature, no weight
    assert 0.2 < info.is_accepted.double().mean() < 1.0
    cov = post.covariance_matrix[0]
    z1 = new.position.z
    assert ((z1.mean(0) - post.loc[0]).abs() <= 4 * (cov.diagonal() / k).sqrt()).all()
    se_cov = ((cov**2 + torch.outer(cov.diagonal(), cov.diagonal())) / k).sqrt()
    assert ((torch.cov(z1.T) - cov).abs() <= 4 * se_cov).all()


def test_run_records_at_the_chosen_steps_and_counts(lg, seed):
    x = lg.sample(2, torch.Generator().manual_seed(seed))
    k, n = 3, 2
    path = make_target(lg, x, k).path("prior")
    g = torch.Generator().manual_seed(seed)
    schedule = torch.linspace(0, 1, 11).unsqueeze(-1)
    tuning = Fixed(0.2).tuning(None, k, n, schedule)
    state = engine.init(path.sample_initial(g), path.value_and_grad, HMC(num_leapfrog=2).transition,
                        rows_of(schedule[0], k, n), tuning)
    totals = engine.Totals(k * n, schedule)
    recorder = engine.Recorder(schedule, k, steps=[2, 5, 10], keep_states=True)
    seen = []
    state = engine.run(state, schedule, kernel=HMC(num_leapfrog=2).transition,
                          density=path.value_and_grad, generator=g, num_examples=n,
                          hooks=[totals, recorder, lambda t, *_: seen.append(t)])
    trace, steps = recorder.trace()
    assert seen == list(range(1, 11)) and steps.tolist() == [2, 5, 10]
    assert set(trace) == {"acceptance_rate", "step_size", "log_weight", "beta", "diverging",
                          "energy_error", "z"}
    assert trace["log_weight"].shape == (3, k * n) and trace["z"].shape == (3, k * n, 2)
    assert torch.equal(trace["log_weight"][-1], state.log_weight)
    torch.testing.assert_close(trace["beta"][:, 0], torch.tensor([0.2, 0.5, 1.0]))
    assert totals.acceptance_sum.shape == (k * n,) and (totals.acceptance_sum <= 10).all()
    assert torch.all(state.beta == 1.0)


def test_a_checkpointed_loop_continues_bit_for_bit(lg, seed):
    """Stop after step 4 (the Checkpointer's snapshot), restore, finish: same as one run."""
    x = lg.sample(2, torch.Generator().manual_seed(seed))
    k, n = 2, 2
    path = make_target(lg, x, k).path("prior")
    schedule = torch.linspace(0, 1, 9).unsqueeze(-1)
    kernel = HMC(num_leapfrog=2, adapt="online")

    def fresh():
        g = torch.Generator().manual_seed(seed)
        tuning = kernel.adaptation.tuning(None, k, n, schedule)
        state = engine.init(path.sample_initial(g), path.value_and_grad, kernel.transition,
                            rows_of(schedule[0], k, n), tuning)
        return g, tuning, state, engine.Totals(k * n, schedule), engine.Recorder(schedule, k)

    g, tuning, state, whole_totals, whole_rec = fresh()
    whole = engine.run(state, schedule, kernel=kernel.transition, density=path.value_and_grad,
                       generator=g, num_examples=n, hooks=[whole_totals, whole_rec])

    g, tuning, state, totals, rec = fresh()
    saved = []
    ckpt = engine.Checkpointer(4, 8, saved.append, {"totals": totals, "recorder": rec}, g,
                               {"tag": 1})
    engine.run(state, schedule[:5], kernel=kernel.transition, density=path.value_and_grad,
               generator=g, num_examples=n, hooks=[totals, rec, ckpt])
    assert saved[-1]["tag"] == 1
    snap = saved[-1]["loop"]
    assert snap["step"] == 4
    g2 = torch.Generator().manual_seed(123)
    g2.set_state(snap["generator"])
    totals2, rec2 = engine.Totals(k * n, schedule), engine.Recorder(schedule, k)
    totals2.restore(snap["hooks"]["totals"])
    rec2.restore(snap["hooks"]["recorder"])
    state2 = engine.restore(snap, kernel.adaptation.tuning(None, k, n, schedule))
    resumed = engine.run(state2, schedule, kernel=kernel.transition, density=path.value_and_grad,
                         generator=g2, num_examples=n, first_step=5, hooks=[totals2, rec2])
    assert torch.equal(resumed.log_weight, whole.log_weight)
    assert torch.equal(resumed.position.z, whole.position.z)
    assert torch.equal(totals2.acceptance_sum, whole_totals.acceptance_sum)
    assert all(torch.equal(a, b) for a, b in zip(rec2.trace()[0].values(),
                                                 whole_rec.trace()[0].values(), strict=True))


def test_stops_cap_each_row_and_equal_a_capped_schedule(lg, seed):
    """``engine.run(stops=)``: a row anneals along its column capped at its stop. With one stop for
    every row that is the run along the capped schedule, bit for bit; forward rows past their stop
    add nothing to their weight, reverse rows start at it."""
    x = lg.sample(3, torch.Generator().manual_seed(seed))
    k, n = 2, 3
    path = make_target(lg, x, k).path("prior")
    schedule = torch.linspace(0, 1, 11).unsqueeze(-1)
    kernel = HMC(num_leapfrog=2)
    # step sizes that fall with beta, read per row: a stop must reach the table too
    table = StepSizes(torch.tensor([0.0, 1.0]), torch.log(torch.tensor([[0.5] * n, [0.05] * n])))

    def anneal(sched, stops):
        g = torch.Generator().manual_seed(seed)
        state = engine.init(path.sample_initial(g), path.value_and_grad, kernel.transition,
                            engine.capped(rows_of(sched[0], k, n), stops), TableTuning(table, k))
        rec = engine.Recorder(sched, k, stride=1)
        out = engine.run(state, sched, kernel=kernel.transition,
                            density=path.value_and_grad, generator=g, num_examples=n,
                            hooks=[rec], stops=stops)
        return out, rec.trace()[0]

    for column in (schedule, schedule.flip(0)):  # forward, reverse
        capped, seen = anneal(column, torch.full((k * n,), 0.6))
        explicit, want = anneal(column.clamp(max=0.6), None)
        assert torch.equal(capped.log_weight, explicit.log_weight)
        assert torch.equal(capped.position.z, explicit.position.z)
        assert torch.equal(seen["step_size"], want["step_size"])  # the table read at the stop
    stops = torch.tensor([0.3, 0.6, 1.0]).repeat(k)  # per example, rows chain-major
    out, trace = anneal(schedule, stops)
    assert torch.equal(out.beta, stops)
    weights = trace["log_weight"]  # (R, rows): no change once a row is at its stop
    for row, step in ((0, 3), (1, 6)):
        assert torch.equal(weights[step - 1:, row], weights[step - 1, row].expand(11 - step))
        assert not torch.equal(weights[step - 2, row], weights[step - 1, row])
    back, trace = anneal(schedule.flip(0), stops)
    assert torch.equal(back.beta, torch.zeros(k * n))
    # row 0 (stop 0.3) starts at its stop: its weight moves from step 8 (beta 0.2) on
    assert (trace["log_weight"][:7, 0] == 0).all() and (trace["log_weight"][7:, 0] != 0).all()
