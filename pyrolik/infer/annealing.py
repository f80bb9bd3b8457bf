"""Forward and reverse annealed importance sampling: front ends of :func:`pyrolik.annealing.drive`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from pyrolik._random import resolve_seed
from pyrolik._validate import shared_params
from pyrolik.annealing.driver import run
from pyrolik.annealing.kernel import Kernel
from pyrolik.annealing.run import Recording, as_recording
from pyrolik.execution.batches import scope
from pyrolik.infer.tolerance import Tolerance, search, with_budget
from pyrolik.ops.resampling import systematic
from pyrolik.results import AISResult

__all__ = ["ais", "reverse_ais", "posterior_samples", "plot_posterior_decodings"]


@shared_params
def ais(model: Callable[..., Any], x: Tensor, *, num_steps: int | Tolerance | None = None,
        num_chains: int, schedule: str | Tensor = "auto", kernel: Kernel | None = None,
        init: Callable[..., Any] | None = None, model_args: tuple = (),
        model_kwargs: dict | None = None, seed: int | None = None, batch_size: int | None = None,
        record: int | Recording | None = None, progress: bool = True) -> AISResult | None:
    r"""Forward annealed importance sampling along the geometric path.

    .. math:: \log f_\beta(z) = \log p(z) + \beta \log p(x \mid z)

    or, with ``init=guide`` (AIS+encoder), :math:`\log f_\beta = (1-\beta)\log q(z \mid x)
    + \beta \log p(x, z)`, started from exact guide draws. :math:`\mathbb E[w] = p(x)`, so the
    log-mean-exp of the chains' weights is a stochastic lower bound on :math:`\log p(x)` [1]_, [2]_.

    Parameters
    ----------
    num_steps : int or Tolerance
        Annealing steps T (transitions); a :class:`~pyrolik.Tolerance` chooses them by BDMC on data
        simulated from the model (``result.budget`` says how); ``None`` when ``schedule`` is a
        tensor.

    Returns
    -------
    AISResult
        ``log_likelihood`` (N,), ``log_weights`` (K, N), ``bound == "lower"``, final ``latents``,
        diagnostics in ``trace``, ``failed`` (N,).

    Examples
    --------
    >>> import torch, pyrolik
    >>> from pyrolik_models import LinearGaussian
    >>> lg = LinearGaussian.random(data_dim=3, latent_dim=2, seed=0)   # exact log p(x) known
    >>> x = lg.sample(4, torch.Generator().manual_seed(0))
    >>> result = pyrolik.ais(lg, x, num_steps=50, num_chains=8, seed=0, progress=False)
    >>> result.bound, result.log_likelihood.shape, result.log_weights.shape
    ('lower', torch.Size([4]), torch.Size([8, 4]))
    >>> bool((result.log_likelihood - lg.exact_log_marginal(x)).abs().max() < 1.0)
    True

    ``kernel=pyrolik.SMC(resample=None)`` runs plain AIS: independent chains, never resampled.

    >>> plain = pyrolik.ais(lg, x, num_steps=50, num_chains=8, kernel=pyrolik.SMC(resample=None),
    ...                     seed=0, progress=False)
    >>> bool((plain.log_likelihood - lg.exact_log_marginal(x)).abs().max() < 1.0)
    True

    References
    ----------
    .. [1] R. M. Neal. Annealed importance sampling. Statistics and Computing, 2001.
    .. [2] Y. Wu, Y. Burda, R. Salakhutdinov, R. Grosse. On the quantitative analysis of
       decoder-based generative models. ICLR, 2017.
    """
    chosen = None
    if isinstance(num_steps, Tolerance):
        if scope().distributed:
            raise ValueError("a Tolerance runs its budget search on one process: choose num_steps "
                             "with pyrolik.budget on one process, then pass that num_steps= inside "
                             "pyrolik.distributed()")
        seed = resolve_seed(seed)  # one seed for the search and the run
        chosen = search(model, x, num_steps, num_chains=num_chains, schedule=schedule,
                        kernel=kernel, init=init, model_args=model_args,
                        model_kwargs=model_kwargs, seed=seed, batch_size=batch_size,
                        progress=progress, what="ais(num_steps=Tolerance)", stacklevel=4)
        num_steps = chosen.num_steps
    recording = as_recording(record)
    _, results = run("ais", model, x, directions=("forward",), num_steps=num_steps,
                  num_chains=num_chains, schedule=schedule, kernel=kernel, init=init,
                  model_args=model_args, model_kwargs=model_kwargs, seed=seed,
                  batch_size=batch_size, progress=progress, recording=recording)
    if results is None:
        return None
    return with_budget(results[0], chosen)


@shared_params
def reverse_ais(model: Callable[..., Any], x: Tensor, latents: Tensor | dict[str, Tensor], *,
                num_steps: int | None, num_chains: int, schedule: str | Tensor = "auto",
                kernel: Kernel | None = None, init: Callable[..., Any] | None = None,
                model_args: tuple = (), model_kwargs: dict | None = None, seed: int | None = None,
                batch_size: int | None = None, progress: bool = True) -> AISResult | None:
    r"""Reverse AIS from exact posterior draws ``latents``: a stochastic upper bound on log p(x).

    The chain of :func:`ais` on the reversed schedule (:math:`\beta` from 1 to 0), started at
    ``latents``. If they are exact draws of :math:`p(z \mid x)`, :math:`\mathbb E[w] = 1/p(x)` and
    :math:`-\log\frac1K\sum_k w_k \ge \log p(x)` in expectation [1]_.

    .. warning::
       The bound holds **only** for exact posterior samples, in practice ``(x, latents)`` from
       :func:`pyrolik.simulate`; use it through :func:`pyrolik.bdmc`.

    Parameters
    ----------
    latents : dict or torch.Tensor
        ``{site: tensor}`` (or a tensor), ``(N, *site)`` or ``(num_chains, N, *site)``.

    Returns
    -------
    AISResult
        ``log_likelihood = -logmeanexp(log_weights)``, ``bound == "upper"``, ``direction == "reverse"``.

    Examples
    --------
    >>> import pyrolik
    >>> from pyrolik_models import LinearGaussian
    >>> lg = LinearGaussian.random(data_dim=3, latent_dim=2, seed=0)   # exact log p(x) known
    >>> sim = pyrolik.simulate(lg, 4, data_shape=(3,), seed=0)   # x and exact posterior draws
    >>> upper = pyrolik.reverse_ais(lg, sim.x, sim.latents, num_steps=50, num_chains=8, seed=0,
    ...                             progress=False)
    >>> upper.bound, upper.direction, upper.log_likelihood.shape
    ('upper', 'reverse', torch.Size([4]))
    >>> error = upper.log_likelihood - lg.exact_log_marginal(sim.x)   # >= 0 in expectation
    >>> bool(error.abs().max() < 1.0)
    True

    References
    ----------
    .. [1] R. Grosse, Z. Ghahramani, R. Adams. Sandwiching the marginal likelihood using
       bidirectional Monte Carlo. arXiv:1511.02543, 2015.
    """
    _, results = run("reverse_ais", model, x, directions=("reverse",), num_steps=num_steps,
                  num_chains=num_chains, schedule=schedule, kernel=kernel, init=init,
                  latents=latents, model_args=model_args, model_kwargs=model_kwargs, seed=seed,
                  batch_size=batch_size, progress=progress)
    return None if results is None else results[0]


def posterior_samples(result: AISResult, num_samples: int, *, examples: Sequence[int] | None = None,
                      seed: int | None = 0) -> dict[str, Tensor]:
    """Resample the final AIS states by weight (systematic): equally weighted posterior draws.

    Returns ``{site: (num_samples, len(examples), *site)}``, draws of the annealed posterior.

    Parameters
    ----------
    result : AISResult
        A forward AIS result (:func:`pyrolik.ais`), which keeps its final states and weights.
    num_samples : int
        Draws per example.
    examples : sequence of int, optional
        Indices of the examples to draw for (default: all).
    seed : int, optional
        Seeds the resampling; ``None`` draws from torch's global generator.
    """
    if result.direction != "forward" or result.latents is None or result.log_weights is None:
        raise ValueError("posterior samples come from a forward AIS result (pyrolik.ais)")
    idx = torch.arange(result.num_examples) if examples is None else torch.as_tensor(examples)
    if (idx < 0).any() or (idx >= result.num_examples).any():
        raise ValueError(f"examples must lie in [0, {result.num_examples}), got {idx.tolist()}")
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    chains = systematic(result.log_weights[:, idx].double().cpu(), num_samples, generator=g)
    return {name: v[chains.to(v.device), idx.to(v.device)] for name, v in result.latents.items()}


def plot_posterior_decodings(result: AISResult, decode: Callable[[dict[str, Tensor]], Tensor],
                             examples: Sequence[int] = (0, 1, 2, 3), num_samples: int = 8,
                             image_shape: tuple[int, int] | None = None, seed: int | None = 0):
    """A grid: each row one example, its data, then decodings of posterior samples; returns the figure.

    Parameters
    ----------
    result : AISResult
        A forward AIS result (:func:`pyrolik.ais`) that holds its data ``x``.
    decode : callable
        Maps ``{site: (S * n, *site)}`` posterior samples to decoded means ``(S * n, D)``.
    examples : sequence of int
        Indices of the examples to show, one row each (n).
    num_samples : int
        Posterior samples decoded per example (S).
    image_shape : (int, int), optional
        Height and width of one image (default: square, from ``D``).
    seed : int, optional
        Seeds the resampling of :func:`posterior_samples`.

    Returns
    -------
    matplotlib.figure.Figure
        The grid.
    """
    import matplotlib.pyplot as plt

    samples = posterior_samples(result, num_samples, examples=examples, seed=seed)
    s, n = num_samples, len(examples)
    flat = {k: v.reshape(s * n, *v.shape[2:]) for k, v in samples.items()}
    with torch.no_grad():
        images = decode(flat).reshape(s, n, -1).detach().cpu().double().numpy()
    if result.x is None:
        raise ValueError("this AIS result holds no data x to show beside the decodings")
    data = result.x[torch.as_tensor(examples)].reshape(n, -1).cpu().double().numpy()
    d = data.shape[-1]
    shape = image_shape or (int(round(d**0.5)),) * 2
    if shape[0] * shape[1] != d:
        raise ValueError(f"image_shape {shape} does not hold {d} values; pass image_shape=")
    fig, axes = plt.subplots(n, s + 1, figsize=(1.1 * (s + 1), 1.1 * n), squeeze=False)
    for i in range(n):
        axes[i, 0].imshow(data[i].reshape(shape), cmap="gray")
        for j in range(s):
            axes[i, j + 1].imshow(images[j, i].reshape(shape), cmap="gray")
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0, 0].set_title("data", fontsize=8)
    for j in range(s):
        axes[0, j + 1].set_title(f"z~post {j + 1}", fontsize=7)
    fig.suptitle("decodings of AIS posterior samples", fontsize=9)
    fig.tight_layout()
    return fig
