"""Faults and bad input: failed examples are flagged, out-of-memory names batch_size, and every error
of API.md is raised through the public API with a message that names the fix."""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyrolik
from pyrolik.annealing import Recording
from pyrolik.execution.batches import FailedExamplesWarning, is_out_of_memory
from pyrolik.model.evaluation import Program
from pyrolik.model.target import Target
from tests import scale_models as sm

# -- examples whose likelihood is NaN -------------------------------------------------------------


def _nan_data(seed):
    x = sm.sample(6, seed)
    x[:, 0] = torch.tensor([2.0, -1.0, 0.5, 3.0, -2.0, 0.0], dtype=x.dtype)
    return x, torch.tensor([True, False, False, True, False, False])


@pytest.mark.parametrize("method", ["ais", "iwae", "lw", "reverse_ais"])
def test_nan_examples_are_marked_and_do_not_touch_the_others(method, seed):
    x, bad = _nan_data(seed)
    kernel = pyrolik.HMC(num_leapfrog=2)
    z = torch.zeros(6, 2)

    # the adaptive schedule is pooled over a batch's examples (a failed one would change the
    # others' schedule): the isolation of the estimates themselves is checked on a fixed schedule
    def run(model, schedule="sigmoid"):
        if method == "ais":
            return pyrolik.ais(model, x, num_steps=10, num_chains=3, kernel=kernel, seed=seed,
                               progress=False, schedule=schedule)
        if method == "reverse_ais":
            return pyrolik.reverse_ais(model, x, z, num_steps=10, num_chains=3, kernel=kernel,
                                       seed=seed, progress=False, schedule=schedule)
        if method == "iwae":
            return pyrolik.iwae(model, x, _prior_guide, num_samples=20, seed=seed, progress=False)
        return pyrolik.likelihood_weighting(model, x, num_samples=20, seed=seed, progress=False)

    clean = run(sm.model)
    with pytest.warns(FailedExamplesWarning, match=r"2 of 6 examples failed.*\[0, 3\]"):
        r = run(sm.nan_model)
    assert torch.equal(r.failed, bad)
    assert torch.isnan(r.log_likelihood[bad]).all()
    # per-example isolation: the other examples get exactly the numbers of the clean model
    assert torch.equal(r.log_likelihood[~bad], clean.log_likelihood[~bad])
    ok = clean.log_likelihood[~bad]
    assert r.mean == pytest.approx(float(ok.mean()), abs=1e-12)
    assert r.stderr == pytest.approx(float(ok.std() / math.sqrt(len(ok))), abs=1e-12)
    assert any("2 of 6 examples failed" in w for w in r.warnings())
    assert r.summary()["failed"].iloc[0] == 2
    if method in ("ais", "reverse_ais"):
        # the default schedule is built from the pilot's variances of the examples that did not fail
        with pytest.warns(FailedExamplesWarning, match=r"2 of 6 examples failed"):
            d = run(sm.nan_model, schedule="auto")
        assert d.settings["schedule"] == "adaptive"
        assert torch.equal(d.failed, bad) and torch.isfinite(d.log_likelihood[~bad]).all()
        steps = d.schedule.diff() * (1 if method == "ais" else -1)  # reverse AIS stores 1 -> 0
        assert torch.isfinite(d.schedule).all() and (steps > 0).all()


def _prior_guide(x):
    with pyro.plate("data", x.shape[0]):
        pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))


def test_bdmc_with_failed_examples_excludes_them_from_the_gap(seed):
    sim = pyrolik.simulate(sm.model, 8, data_shape=(5,), seed=0)  # examples 3 and 7 fail
    bad = sim.x[:, 0] > 1.0
    kw = dict(num_steps=8, num_chains=2, kernel=pyrolik.HMC(num_leapfrog=2), seed=seed,
              progress=False)
    with pytest.warns(FailedExamplesWarning, match=r"2 of 8 .*\[3, 7\]"):
        r = pyrolik.bdmc(sm.nan_model, sim, **kw)
    assert torch.equal(r.failed, bad)
    assert math.isfinite(r.gap) and math.isfinite(r.mean)
    assert r.gap == pytest.approx(float(r.per_example_gap[~bad].mean()), abs=1e-12)


def test_a_model_that_fails_on_every_example_is_flagged(seed):
    def broken(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ sm.W.T, -1.0).to_event(1), obs=x)

    with pytest.warns(FailedExamplesWarning, match="all 3 examples failed.*validation_enabled"):
        r = pyrolik.ais(broken, sm.sample(3), num_steps=3, num_chains=2, seed=seed, progress=False)
    assert r.failed.all() and math.isnan(r.mean)


def test_data_outside_the_support_is_still_an_error():
    def bernoulli(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Bernoulli(logits=z @ sm.W.T).to_event(1), obs=x)

    with pytest.raises(ValueError, match="observed site .x. has support .* but x holds values outside it"):
        pyrolik.ais(bernoulli, torch.full((3, 5), 0.5), num_steps=3, num_chains=2, progress=False)


# -- out of memory ---------------------------------------------------------------------------------


def test_out_of_memory_suggests_batch_size(monkeypatch):
    sim = pyrolik.simulate(sm.model, 8, data_shape=(5,), seed=0, dtype=torch.float64)
    x = sim.x
    orig = Target.value_and_grad

    def oom_on_second_batch(self, *args, **kwargs):
        if torch.equal(self.program.x[0], x[4]):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return orig(self, *args, **kwargs)

    monkeypatch.setattr(Target, "value_and_grad", oom_on_second_batch)
    with pytest.raises(MemoryError, match=r"examples \[4:8\] \(4 examples x 2 chains.*pass a "
                       r"smaller batch_size \(e.g. batch_size=1\).*Tried to allocate"):
        pyrolik.ais(sm.model, x, num_steps=3, num_chains=2, batch_size=4, progress=False)
    with pytest.raises(MemoryError, match=r"examples \[4:8\] \(4 examples x 4 chains"):
        pyrolik.bdmc(sm.model, sim, num_steps=3, num_chains=2, batch_size=4, progress=False)

    def cpu_oom(self, *args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't "
                           "allocate memory: you tried to allocate 1000000000000 bytes")

    monkeypatch.setattr(Program, "sample_prior", cpu_oom)
    with pytest.raises(MemoryError, match=r"examples \[0:8\].*batch_size=2"):
        pyrolik.likelihood_weighting(sm.model, x, num_samples=5, progress=False)

    def other(self, *args, **kwargs):
        raise RuntimeError("some other failure")

    monkeypatch.setattr(Program, "sample_prior", other)
    with pytest.raises(RuntimeError, match="^some other failure$"):
        pyrolik.likelihood_weighting(sm.model, x, num_samples=5, progress=False)
    assert not is_out_of_memory(ValueError("out of memory"))


# -- bad input through the public API --------------------------------------------------------------

X = sm.sample(3)
Z = torch.zeros(3, 2)
AIS = dict(num_steps=3, num_chains=2, progress=False)
COUNT_CASES = [
    (lambda v: pyrolik.ais(sm.model, X, **{**AIS, "num_steps": v}), "num_steps"),
    (lambda v: pyrolik.ais(sm.model, X, **{**AIS, "num_chains": v}), "num_chains"),
    (lambda v: pyrolik.ais(sm.model, X, batch_size=v, **AIS), "batch_size"),
    (lambda v: pyrolik.ais(sm.model, X, record=v, **AIS), "record"),
    (lambda v: pyrolik.ais(sm.model, X, record=Recording(every=v), **AIS), "record.every"),
    (lambda v: pyrolik.reverse_ais(sm.model, X, Z, **{**AIS, "num_steps": v}), "num_steps"),
    (lambda v: pyrolik.reverse_ais(sm.model, X, Z, **{**AIS, "num_chains": v}), "num_chains"),
    (lambda v: pyrolik.reverse_ais(sm.model, X, Z, batch_size=v, **AIS), "batch_size"),
    (lambda v: pyrolik.bdmc(sm.model, 3, data_shape=(5,), **{**AIS, "num_steps": v}), "num_steps"),
    (lambda v: pyrolik.bdmc(sm.model, 3, data_shape=(5,), **{**AIS, "num_chains": v}), "num_chains"),
    (lambda v: pyrolik.bdmc(sm.model, 3, data_shape=(5,), batch_size=v, **AIS), "batch_size"),
    (lambda v: pyrolik.simulate(sm.model, v, data_shape=(5,)), "num_examples"),
    (lambda v: pyrolik.iwae(sm.model, X, _prior_guide, num_samples=v), "num_samples"),
    (lambda v: pyrolik.iwae(sm.model, X, _prior_guide, num_samples=2, batch_size=v), "batch_size"),
    (lambda v: pyrolik.likelihood_weighting(sm.model, X, num_samples=v), "num_samples"),
    (lambda v: pyrolik.likelihood_weighting(sm.model, X, num_samples=2, chunk_size=v),
     "chunk_size"),
    (lambda v: pyrolik.kde(X, X, bandwidth=0.1, chunk_size=v), "chunk_size"),
    (lambda v: pyrolik.HMC(num_leapfrog=v), "num_leapfrog"),
    (lambda v: pyrolik.schedules.sigmoid(v), "num_steps"),
]


@pytest.mark.parametrize("value", [0, -3, 2.5, True, "4"])
@pytest.mark.parametrize("case", range(len(COUNT_CASES)))
def test_non_positive_or_non_integer_counts_are_refused_everywhere(case, value):
    call, name = COUNT_CASES[case]
    with pytest.raises(ValueError, match=f"{name} must be a positive integer, got {value!r}"):
        call(value)


@pytest.mark.parametrize("value", [0, -3, True])
def test_bdmc_refuses_a_bad_number_of_examples(value):
    with pytest.raises(ValueError, match=f"num_examples must be a positive integer, got {value!r}"):
        pyrolik.bdmc(sm.model, value, data_shape=(5,), **AIS)


@pytest.mark.parametrize("value", [2.5, "4", None, X])
def test_bdmc_refuses_what_is_neither_a_number_of_examples_nor_data(value):
    # bdmc's second argument is an int or (x, latents): anything else is named as both
    with pytest.raises(TypeError, match=r"num_examples must be an int, or data simulated from the "
                                        r"model: a pair \(x, latents\)"):
        pyrolik.bdmc(sm.model, value, data_shape=(5,), **AIS)


BAD_SCHEDULES = [
    (torch.tensor([0.1, 0.5, 1.0]), "start at exactly 0"),
    (torch.tensor([0.0, 0.5, 0.9]), "end at exactly 1"),
    (torch.tensor([0.0, 0.7, 0.3, 1.0]), "strictly increasing"),
    (torch.tensor([0.0, 0.5, 0.5, 1.0]), "strictly increasing"),
    (torch.tensor([0.0, float("nan"), 1.0]), "NaN"),
    (torch.tensor([[0.0, 1.0]]), "1-D tensor"),
    (torch.tensor([0.0]), "at least 2 betas"),
    ("cosine", "unknown schedule"),
]


@pytest.mark.parametrize("schedule,message", BAD_SCHEDULES)
def test_bad_schedules_through_every_annealing_estimator(schedule, message):
    steps = None if isinstance(schedule, torch.Tensor) else 3
    kw = dict(num_steps=steps, num_chains=2, schedule=schedule, progress=False)
    for call in (lambda: pyrolik.ais(sm.model, X, **kw),
                 lambda: pyrolik.reverse_ais(sm.model, X, Z, **kw),
                 lambda: pyrolik.bdmc(sm.model, 3, data_shape=(5,), **kw)):
        with pytest.raises(ValueError, match=message):
            call()


def test_schedule_length_and_type_errors():
    with pytest.raises(ValueError, match="num_steps=3 needs 4"):
        pyrolik.ais(sm.model, X, num_steps=3, num_chains=2, schedule=torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="num_steps is required with a named schedule"):
        pyrolik.ais(sm.model, X, num_steps=None, num_chains=2)
    with pytest.raises(TypeError, match="schedule must be a name"):
        pyrolik.ais(sm.model, X, num_steps=None, num_chains=2, schedule=[0.0, 1.0])


def test_a_tolerance_where_no_search_runs_is_refused_with_the_way_to_one():
    tol, kw = pyrolik.Tolerance(0.5), dict(num_chains=2, progress=False)
    for call in (lambda: pyrolik.reverse_ais(sm.model, X, Z, num_steps=tol, **kw),
                 lambda: pyrolik.bdmc(sm.model, 3, data_shape=(5,), num_steps=tol, **kw),
                 lambda: pyrolik.distortion_bdmc(sm.model, 3, sigmas=[0.5, 1.0], data_shape=(5,),
                                                 num_steps=tol, **kw),
                 lambda: pyrolik.evidence_bdmc(sm.model, 2, data_shape=(3, 5), num_steps=tol, **kw)):
        with pytest.raises(ValueError, match=r"only ais, evidence, sigma_curve and rate_distortion "
                                             r"choose the steps for a Tolerance; pass the result\.budget"):
            call()
    # the fix it names works
    b = pyrolik.budget(sm.model, X, tol, num_chains=2, seed=0, progress=False)
    assert pyrolik.bdmc(sm.model, 3, data_shape=(5,), num_steps=b.num_steps, **kw).num_examples == 3


def _discrete(x):
    with pyro.plate("data", x.shape[0]):
        c = pyro.sample("c", dist.Bernoulli(0.5))
        pyro.sample("x", dist.Normal(c.unsqueeze(-1).expand(x.shape), 1.0).to_event(1), obs=x)


def _no_plate(x):
    z = pyro.sample("z", dist.Normal(torch.zeros(x.shape[0]), 1.0).to_event(1))
    pyro.sample("x", dist.Normal(z.unsqueeze(-1).expand(x.shape), 1.0).to_event(2), obs=x)


def _no_obs(x):
    with pyro.plate("data", x.shape[0]):
        pyro.sample("z", dist.Normal(0.0, 1.0))


def _empty_guide(x):
    pass


MODEL_CASES = [
    (dict(model=_discrete), TypeError, "discrete.*marginalise"),
    (dict(model=_no_plate), ValueError, "no plate over the examples.*pyro.plate"),
    (dict(model=_no_obs), ValueError, "no observed site.*obs=x"),
    (dict(x=torch.randn(3, 7)), ValueError, "shape .* matching the observed site"),
    (dict(x=torch.tensor([[float("nan")] * 5] * 3)), ValueError, "NaN or inf.*remove or impute"),
    (dict(x=X.numpy()), TypeError, "torch.Tensor.*torch.as_tensor"),
    (dict(model="vae"), TypeError, "callable Pyro model"),
]


@pytest.mark.parametrize("change,error,message", MODEL_CASES)
@pytest.mark.parametrize("method", ["ais", "iwae", "lw", "bdmc"])
def test_model_and_data_errors_through_every_estimator(method, change, error, message):
    model, x = change.get("model", sm.model), change.get("x", X)
    with pytest.raises(error, match=message):
        if method == "ais":
            pyrolik.ais(model, x, **AIS)
        elif method == "iwae":
            pyrolik.iwae(model, x, _prior_guide, num_samples=2, progress=False)
        elif method == "lw":
            pyrolik.likelihood_weighting(model, x, num_samples=2, progress=False)
        else:
            pyrolik.bdmc(model, (x, Z), **AIS)


def test_guide_errors():
    with pytest.raises(ValueError, match="guide misses the latent site.*every latent site"):
        pyrolik.iwae(sm.model, X, _empty_guide, num_samples=2)
    with pytest.raises(ValueError, match="guide misses the latent site"):
        pyrolik.ais(sm.model, X, init=_empty_guide, **AIS)
    with pytest.raises(TypeError, match="init must be a callable Pyro guide"):
        pyrolik.ais(sm.model, X, init="guide", **AIS)


def test_distributed_without_a_process_group_names_the_fix():
    # refused when the block is entered, before any estimator runs
    with pytest.raises(ValueError, match=r"pyrolik.distributed\(\) needs.*torchrun.*init_process_group"):
        with pyrolik.distributed():
            pytest.fail("the block was entered without a process group")
    # and nothing is left in force after the refusal: the estimator runs on one process
    assert pyrolik.ais(sm.model, X, **AIS).log_likelihood.shape == (3,)
