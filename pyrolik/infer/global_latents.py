"""The evidence of a whole data set, for models with global latents."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

from pyrolik._random import resolve_seed
from pyrolik._validate import check_count, check_model, shared_params, validate_data
from pyrolik.annealing.kernel import Kernel
from pyrolik.annealing.run import Recording
from pyrolik.execution.batches import scope
from pyrolik.infer.annealing import ais
from pyrolik.infer.sandwich import Simulated, bdmc
from pyrolik.infer.tolerance import Tolerance, search, with_budget
from pyrolik.model.dataset import WholeDataset
from pyrolik.results import AISResult, BDMCResult

__all__ = ["evidence", "evidence_bdmc"]

_VECTORISE = ("pyrolik runs the model once over several copies of the whole data set, in a plate "
              "left of all the model's own plates (the batch dim Pyro's "
              "Trace_ELBO(vectorize_particles=True) adds): the model must broadcast over it. "
              "Write global latents as pyro.sample('mu', dist.Normal(0., 1.).expand([D]).to_event(1)) "
              "and combine them with local ones by broadcasting (mu + z @ W.T, not mu.unsqueeze(0) or "
              "torch.cat with explicit shapes)")


def _one_process(method: str) -> None:
    if scope().distributed:
        raise ValueError(f"{method} anneals one data set on one process: call it outside "
                         "pyrolik.distributed()")


def _wrap(model: Callable[..., Any], x: Tensor, model_args: tuple, model_kwargs: dict | None
          ) -> WholeDataset:
    try:
        return WholeDataset(model, x, model_args, model_kwargs)
    except ValueError:
        raise
    except Exception as err:  # noqa: BLE001 - the model does not run on x as it is
        raise ValueError(f"running the model on x of shape {tuple(x.shape)} failed "
                         f"({type(err).__name__}: {str(err).strip()[:200]}); check that x and "
                         "model_args/model_kwargs fit the model") from err


@contextlib.contextmanager
def _explained() -> Iterator[None]:
    """Errors with the vectorisation hint where the model failed to run over the copies."""
    try:
        yield
    except ValueError as err:
        text = str(err)
        if any(k in text for k in ("running the model", "shape", "other rows of its batch")):
            raise ValueError(f"{text}\n(evidence: {_VECTORISE})") from err
        raise


def _relabel(result: AISResult, method: str, wrapped: WholeDataset) -> AISResult:
    # latents: (K, 1, ...) in the model's own shapes, without the padding
    return dataclasses.replace(
        result, method=method,
        latents=None if result.latents is None else wrapped.unpad(result.latents, 2),
        settings={**result.settings, "observed_sites": list(wrapped.observed),
                  "data_rows": "data set" if wrapped.is_whole_x else "observed values"})


@shared_params
def evidence(model: Callable[..., Any], x: Tensor, *, num_steps: int | Tolerance | None = None,
             num_chains: int, schedule: str | Tensor = "auto", kernel: Kernel | None = None,
             model_args: tuple = (), model_kwargs: dict | None = None, seed: int | None = None,
             record: int | Recording | None = None, progress: bool = True) -> AISResult:
    r"""The log marginal likelihood of the whole data set, :math:`\log p(x_{1:N})`, by AIS.

    AIS anneals global :math:`\theta` and local :math:`z_n` jointly along

    .. math:: \log f_\beta(\theta, z) = \log p(\theta, z) + \beta \log p(x_{1:N} \mid \theta, z).

    :math:`\mathbb E[w] = p(x_{1:N})`: a stochastic lower bound on the evidence [1]_ (Bayes factors:
    :func:`pyrolik.compare`). The model must broadcast over a plate ``"dataset"`` left of its own, as
    for ``Trace_ELBO(vectorize_particles=True)``.

    Parameters
    ----------
    x : torch.Tensor
        The data set, ``(N, *event_shape)``.
    num_chains : int
        AIS chains over the whole data set.
    num_steps : int or Tolerance
        Annealing steps; a :class:`~pyrolik.Tolerance` chooses them on whole data sets simulated
        from the model.

    Returns
    -------
    AISResult
        ``log_likelihood`` ``(1,)``, ``log_weights`` ``(K, 1)``, ``bound == "lower"``,
        ``method == "evidence"``, ``latents`` ``{site: (K, 1, *shape)}``.

    Examples
    --------
    >>> import pyrolik
    >>> from pyrolik_models.oracles.global_gaussian import GlobalLinearGaussian
    >>> model = GlobalLinearGaussian.random()   # a global latent shared by all examples
    >>> x = model.sample(6)                     # one data set of 6 examples
    >>> result = pyrolik.evidence(model, x, num_steps=50, num_chains=8, seed=0, progress=False)
    >>> result.bound, result.log_likelihood.shape   # one estimate for the whole data set
    ('lower', torch.Size([1]))
    >>> bool(abs(float(result.log_likelihood) - float(model.exact_log_evidence(x))) < 2.0)
    True

    References
    ----------
    .. [1] R. M. Neal. Annealed importance sampling. Statistics and Computing, 2001.
    .. [2] R. Grosse, Z. Ghahramani, R. Adams. Sandwiching the marginal likelihood using
       bidirectional Monte Carlo. arXiv:1511.02543, 2015.
    """
    check_model(model)
    x = validate_data(x)
    _one_process("evidence")
    wrapped = _wrap(model, x, model_args, model_kwargs)
    rows = x.unsqueeze(0) if wrapped.is_whole_x else \
        wrapped.to_rows({n: v.unsqueeze(0) for n, v in wrapped.trace_values().items()})
    chosen = None
    with _explained():
        if isinstance(num_steps, Tolerance):  # as ais does, its warnings naming evidence
            seed = resolve_seed(seed)
            chosen = search(wrapped, rows, num_steps, num_chains=num_chains, schedule=schedule,
                            kernel=kernel, init=None, model_args=(), model_kwargs=None, seed=seed,
                            batch_size=None, progress=progress,
                            what="evidence(num_steps=Tolerance)", stacklevel=4)
            num_steps = chosen.num_steps
        result = ais(wrapped, rows, num_steps=num_steps, num_chains=num_chains, schedule=schedule,
                     kernel=kernel, seed=seed, record=record, progress=progress)
    assert result is not None  # one process
    return _relabel(with_budget(result, chosen), "evidence", wrapped)


@shared_params
def evidence_bdmc(model: Callable[..., Any], num_datasets: int, *,
                  data_shape: tuple[int, ...] | torch.Size, num_steps: int | None,
                  num_chains: int, schedule: str | Tensor = "auto", kernel: Kernel | None = None,
                  model_args: tuple = (), model_kwargs: dict | None = None,
                  seed: int | None = None, dtype: torch.dtype | None = None,
                  device: torch.device | str | None = None, progress: bool = True) -> BDMCResult:
    r"""BDMC for :func:`evidence`: sandwich :math:`\log p(x_{1:N})` on data sets simulated from the model.

    Forward AIS (lower bound) and reverse AIS from the simulated latents (upper bound) on
    ``num_datasets`` simulated data sets, as :func:`pyrolik.bdmc`; the gap bounds :func:`evidence`'s error.

    Parameters
    ----------
    num_datasets : int
        Data sets to simulate.
    data_shape : tuple of int
        The shape of one data set, ``(N, *event_shape)``.

    Returns
    -------
    BDMCResult
        ``lower``, ``upper``, ``gap`` per data set, ``x`` ``(num_datasets, N, *event_shape)``.

    Examples
    --------
    >>> import pyrolik
    >>> from pyrolik_models.oracles.global_gaussian import GlobalLinearGaussian
    >>> model = GlobalLinearGaussian.random()
    >>> sandwich = pyrolik.evidence_bdmc(model, 2, data_shape=(6, 4), num_steps=50, num_chains=8,
    ...                                  seed=0, progress=False)   # 2 data sets of 6 examples
    >>> type(sandwich).__name__, bool(sandwich.gap < 2.0)
    ('BDMCResult', True)
    """
    check_model(model)
    check_count("num_datasets", num_datasets)
    _one_process("evidence_bdmc")
    data_shape = (data_shape,) if isinstance(data_shape, int) else tuple(data_shape)
    if not data_shape or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0
                                 for d in data_shape):
        raise ValueError(f"data_shape must be the shape of one data set, (N, *event_shape), a tuple "
                         f"of positive ints; got {data_shape!r}")
    seed = resolve_seed(seed)
    placeholder = torch.zeros(data_shape, dtype=dtype or torch.get_default_dtype(), device=device)
    wrapped = _wrap(model, placeholder, model_args, model_kwargs)
    try:
        rows, latents = wrapped.simulate(num_datasets, seed)
    except Exception as err:  # noqa: BLE001 - say what the simulation needs
        raise ValueError(f"simulating whole data sets from the model failed ({type(err).__name__}: "
                         f"{str(err).strip()[:200]}); {_VECTORISE}") from err
    with _explained():
        result = bdmc(wrapped, Simulated(rows, latents), num_steps=num_steps,
                      num_chains=num_chains, schedule=schedule, kernel=kernel, seed=seed,
                      progress=progress)
    assert result is not None
    return dataclasses.replace(result, lower=_relabel(result.lower, "evidence", wrapped),
                               upper=_relabel(result.upper, "reverse evidence", wrapped),
                               latents=wrapped.unpad(result.latents, 1))
