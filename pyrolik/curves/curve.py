"""Loss-data curves: the validation loss of a probe against the training-set size, for
representations (callables ``x -> features`` ``(N, d)``) such as :func:`raw`, :func:`pca` and
:func:`random_projection` (``docs/curves.md``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from pyrolik.curves.probes import PROBES, evaluate_probes, init_probes, make_probe_set, train_probes

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["LossDataCurve", "default_sizes", "default_lr", "train_valid_split", "loss_data_curve",
           "evaluate_representations", "raw", "random_projection", "pca"]


@dataclass(frozen=True)
class LossDataCurve:
    """Validation loss (nats) and accuracy at each training-set size (:func:`loss_data_curve`).

    Attributes
    ----------
    sizes : numpy.ndarray of int, shape (m,)
        Training-set sizes, strictly increasing, >= 1.
    loss, accuracy : numpy.ndarray, shape (num_seeds, m)
        Each seed's validation cross-entropy (nats) and accuracy (optional) per size.
    name : str
        The representation's name.
    num_classes : int, optional
        K; ``log K`` is the loss with no data.
    """

    sizes: np.ndarray
    loss: np.ndarray
    accuracy: np.ndarray | None = None
    name: str = ""
    num_classes: int | None = None
    info: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        sizes = np.asarray(self.sizes)
        if sizes.ndim != 1 or len(sizes) == 0 or not np.issubdtype(sizes.dtype, np.number):
            raise ValueError("sizes must be a non-empty 1-D array of training-set sizes")
        if np.any(sizes != np.round(sizes)) or np.any(sizes < 1) or np.any(np.diff(sizes) <= 0):
            raise ValueError(f"sizes must be integers >= 1, strictly increasing; got {sizes.tolist()}")
        loss = np.atleast_2d(np.asarray(self.loss, dtype=np.float64))
        if loss.ndim != 2 or loss.shape[1] != len(sizes):
            raise ValueError(f"loss must have shape (num_seeds, {len(sizes)}) to match sizes; got "
                             f"{np.shape(self.loss)}")
        if not np.all(np.isfinite(loss)) or np.any(loss < 0):
            raise ValueError("loss must be finite and >= 0 (a cross-entropy in nats)")
        object.__setattr__(self, "sizes", sizes.astype(np.int64))
        object.__setattr__(self, "loss", loss)
        if self.accuracy is not None:
            acc = np.atleast_2d(np.asarray(self.accuracy, dtype=np.float64))
            if acc.shape != loss.shape:
                raise ValueError(f"accuracy has shape {acc.shape}; it must match loss {loss.shape}")
            object.__setattr__(self, "accuracy", acc)
        if self.num_classes is not None and int(self.num_classes) < 2:
            raise ValueError(f"num_classes must be >= 2; got {self.num_classes}")

    @property
    def num_seeds(self) -> int:
        """Number of seeds (rows of ``loss``)."""
        return self.loss.shape[0]

    @property
    def mean_loss(self) -> np.ndarray:
        """The curve :math:`\\hat L(n_j)`: loss averaged over seeds, shape (m,)."""
        return self.loss.mean(0)

    @property
    def stderr_loss(self) -> np.ndarray:
        """Standard error of :attr:`mean_loss` across seeds (zeros for one seed)."""
        if self.num_seeds < 2:
            return np.zeros(len(self.sizes))
        return self.loss.std(0, ddof=1) / np.sqrt(self.num_seeds)

    @property
    def mean_accuracy(self) -> np.ndarray | None:
        """Accuracy averaged over seeds, shape (m,), or None."""
        return None if self.accuracy is None else self.accuracy.mean(0)

    def truncate(self, n: int) -> LossDataCurve:
        """The curve restricted to sizes <= ``n``: what an evaluation with ``n`` points sees."""
        keep = self.sizes <= n
        if not keep.any():
            raise ValueError(f"n={n} is below the smallest size {self.sizes[0]} of the curve")
        acc = None if self.accuracy is None else self.accuracy[:, keep]
        return LossDataCurve(self.sizes[keep], self.loss[:, keep], acc, self.name, self.num_classes,
                             self.info)

    def to_frame(self) -> pd.DataFrame:
        """Long table, one row per (seed, n): representation, n, seed, loss, accuracy."""
        import pandas as pd

        seeds, idx = np.meshgrid(np.arange(self.num_seeds), np.arange(len(self.sizes)),
                                 indexing="ij")
        data = {"representation": self.name, "n": self.sizes[idx.ravel()], "seed": seeds.ravel(),
                "loss": self.loss.ravel()}
        if self.accuracy is not None:
            data["accuracy"] = self.accuracy.ravel()
        return pd.DataFrame(data)


def default_sizes(num_pool: int, num: int = 8, smallest: int = 10) -> np.ndarray:
    """Log-spaced training-set sizes from ``smallest`` to ``num_pool`` (Reprieve's default grid).

    Parameters
    ----------
    num_pool : int
        The size of the training pool: the largest size.
    num : int
        How many sizes.
    smallest : int
        The smallest size.

    Returns
    -------
    numpy.ndarray of int
    """
    if num_pool < 1 or num < 1 or smallest < 1:
        raise ValueError("num_pool, num and smallest must be >= 1")
    grid = np.ceil(np.geomspace(min(smallest, num_pool), num_pool, num)).astype(np.int64)
    return np.unique(np.minimum(grid, num_pool))


def default_lr(probe: str, num_features: int) -> float:
    """Default Adam learning rate: ``min(0.03, 0.5 / d)`` (linear), ``min(0.01, 0.5 / d)`` (MLP).

    Parameters
    ----------
    probe : {"linear", "mlp"}
        The probe.
    num_features : int
        :math:`d`, the representation's dimension.

    Returns
    -------
    float
    """
    cap = {"linear": 0.03, "mlp": 0.01}
    if probe not in cap:
        raise ValueError(f"probe must be one of {PROBES}; got {probe!r}")
    return min(cap[probe], 0.5 / num_features)


def _as_tensor(a, name: str, floating: bool = False) -> Tensor:
    """``a`` as a tensor; with ``floating``, integers become the default floating dtype."""
    if not isinstance(a, Tensor | np.ndarray):
        raise TypeError(f"{name} must be a torch.Tensor or numpy array; got {type(a).__name__}")
    t = torch.as_tensor(a)
    return t.to(torch.get_default_dtype()) if floating and not t.is_floating_point() else t


def _check_task(features, labels, what: str) -> tuple[Tensor, Tensor]:
    x = _as_tensor(features, f"{what} features", floating=True)
    if x.ndim != 2:
        raise ValueError(f"{what} features must be 2-D (examples, features); got shape "
                         f"{tuple(x.shape)}: flatten them in the representation")
    if not torch.isfinite(x).all():
        raise ValueError(f"{what} features contain NaN or inf; fix the representation or data")
    y = _as_tensor(labels, f"{what} labels")
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise TypeError(f"{what} labels must be integer class indices; got dtype {y.dtype}")
    y = y.long()
    if y.ndim != 1 or len(y) != len(x):
        raise ValueError(f"{what} labels must be 1-D with one label per example ({len(x)}); got "
                         f"shape {tuple(y.shape)}")
    if len(y) and y.min() < 0:
        raise ValueError(f"{what} labels must be >= 0 (class indices 0..K-1)")
    return x, y


def train_valid_split(x, y, *, valid_size: float | int = 0.2, seed: int = 0
                      ) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """Split ``(x, y)`` at random into ``((x_train, y_train), (x_valid, y_valid))``; ``valid_size`` is a
    fraction in (0, 1) or a number of examples.

    Parameters
    ----------
    x : Tensor or ndarray, shape (N, ...)
        The inputs.
    y : Tensor or ndarray, shape (N,)
        The labels.
    valid_size : float or int
        The validation share (a fraction) or count.
    seed : int
        The seed of the permutation.

    Returns
    -------
    tuple
        ``((x_train, y_train), (x_valid, y_valid))``.
    """
    x, y = _as_tensor(x, "x"), _as_tensor(y, "y")
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} examples but y has {len(y)}; pass one label per example")
    v = valid_size
    if isinstance(v, bool) or not isinstance(v, int | np.integer | float) or (
            not isinstance(v, int | np.integer) and not 0 < v < 1):
        raise ValueError(f"valid_size must be a fraction in (0, 1) or a whole number of examples, "
                         f"got {v!r}")
    num_valid = int(round(v * len(x))) if isinstance(v, float) else int(v)
    if not 1 <= num_valid < len(x):
        raise ValueError(f"valid_size={valid_size} leaves no training or no validation examples "
                         f"out of {len(x)}")
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    va, tr = perm[:num_valid], perm[num_valid:]
    return (x[tr], y[tr]), (x[va], y[va])


def loss_data_curve(features, labels, valid_features, valid_labels, *, sizes=None,
                    num_seeds: int = 5, probe: str = "linear", hidden: int = 64,
                    num_steps: int = 500, batch_size: int = 128, lr: float | None = None,
                    weight_decay: float = 1e-3, standardize: bool = True,
                    num_classes: int | None = None, seed: int = 0, name: str = "") -> LossDataCurve:
    r"""Estimate the loss-data curve of one representation by training all probes at once: per size
    and seed, a probe trained on the first :math:`n_j` points of a permutation.

    Parameters
    ----------
    features, labels : Tensor or ndarray, shapes (N, d) and (N,)
        The training pool: the representation's features and integer class labels.
    valid_features, valid_labels : Tensor or ndarray, shapes (V, d) and (V,)
        Held-out data on which each probe's loss is measured.
    sizes : sequence of int, optional
        Increasing, at most N; default :func:`default_sizes`.
    num_seeds : int
        Probes per size (each a data order and an initialisation).
    probe : {"linear", "mlp"}
        Multinomial logistic regression, or one hidden ReLU layer of ``hidden`` units.
    num_steps, batch_size, weight_decay, lr
        Adam's settings for every probe (``lr``: default :func:`default_lr`).
    standardize : bool
        Centre the features, divide by one global scale.
    hidden : int
        The hidden units of the MLP probe.
    num_classes, seed, name
        K (default ``max(label) + 1``), the seed, the curve's label.
    """
    x, y = _check_task(features, labels, "training")
    xv, yv = _check_task(valid_features, valid_labels, "validation")
    if xv.shape[1] != x.shape[1]:
        raise ValueError(f"validation features have {xv.shape[1]} columns but training features "
                         f"{x.shape[1]}")
    if len(xv) == 0:
        raise ValueError("the validation set is empty; pass held-out examples")
    xv = xv.to(device=x.device, dtype=x.dtype)
    if probe not in PROBES:
        raise ValueError(f"probe must be one of {PROBES}; got {probe!r}")
    for key, value in {"num_seeds": num_seeds, "hidden": hidden, "num_steps": num_steps,
                       "batch_size": batch_size}.items():
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"{key} must be a positive integer; got {value!r}")
    lr = default_lr(probe, x.shape[1]) if lr is None else lr
    if not lr > 0 or not weight_decay >= 0:
        raise ValueError(f"need lr > 0 and weight_decay >= 0; got lr={lr}, weight_decay={weight_decay}")
    k = int(max(y.max(), yv.max())) + 1 if num_classes is None else int(num_classes)
    if k < 2 or y.max() >= k or yv.max() >= k:
        raise ValueError(f"labels must lie in 0..num_classes-1 with num_classes >= 2; got K={k}")
    sizes = default_sizes(len(x)) if sizes is None else np.asarray(sizes)
    if (sizes.ndim != 1 or len(sizes) == 0 or np.any(sizes != np.round(sizes))
            or np.any(np.diff(sizes) <= 0) or sizes[0] < 1 or sizes[-1] > len(x)):
        raise ValueError(f"sizes must be increasing integers in 1..{len(x)} (the training pool); "
                         f"got {np.asarray(sizes).tolist()}")
    if standardize:
        mean, scale = x.mean(0), x.var(0).mean().sqrt().clamp(min=1e-12)
        x, xv = (x - mean) / scale, (xv - mean) / scale

    g = torch.Generator().manual_seed(seed)
    probe_set = make_probe_set(len(x), torch.as_tensor(sizes), num_seeds, g)
    init = init_probes(probe, probe_set.seeds, x.shape[1], k, hidden=hidden, generator=g,
                       dtype=x.dtype)
    init = {key: v.to(x.device) for key, v in init.items()}
    y, yv = y.to(x.device), yv.to(x.device)
    params = train_probes(x, y, probe_set, init, num_steps=num_steps, batch_size=batch_size,
                          lr=lr, weight_decay=weight_decay)
    loss, acc = evaluate_probes(params, xv, yv)
    shape = (len(sizes), num_seeds)  # probes are size-major
    if not torch.isfinite(loss).all():
        bad = sorted({int(sizes[i // num_seeds]) for i in torch.nonzero(~torch.isfinite(loss))})
        raise FloatingPointError(f"training diverged (non-finite validation loss) for sizes {bad} "
                                 f"with lr={lr}; pass a smaller lr=")
    info = {"probe": probe, "hidden": hidden if probe == "mlp" else None, "num_steps": num_steps,
            "batch_size": batch_size, "lr": lr, "weight_decay": weight_decay, "seed": seed,
            "num_valid": len(xv), "in_dim": x.shape[1]}
    return LossDataCurve(sizes=np.asarray(sizes, dtype=np.int64),
                         loss=loss.view(shape).T.double().cpu().numpy(),
                         accuracy=acc.view(shape).T.double().cpu().numpy(), name=name,
                         num_classes=k, info=info)


def evaluate_representations(representations: Mapping[str, Callable], train: tuple, valid: tuple,
                             **kwargs) -> dict[str, LossDataCurve]:
    """Loss-data curves of several representations of the same task: ``{name: LossDataCurve}``.

    Parameters
    ----------
    representations : dict of callable
        ``{name: x -> features}``.
    train, valid : tuple
        ``(x, y)`` of the training pool and of the validation data.
    **kwargs
        Passed to :func:`loss_data_curve` (``sizes``, ``num_seeds``, ``num_steps``, ...).

    Returns
    -------
    dict of LossDataCurve
    """
    if not isinstance(representations, Mapping) or not representations:
        raise TypeError("representations must be a non-empty dict of name -> callable")
    for key, fn in representations.items():
        if not callable(fn):
            raise TypeError(f"representation {key!r} is not callable; pass a function x -> features")
    (x, y), (xv, yv) = train, valid
    with torch.no_grad():
        feats = {key: (fn(x), fn(xv)) for key, fn in representations.items()}
    # one batched training per representation
    return {key: loss_data_curve(f, y, fv, yv, name=key, **kwargs) for key, (f, fv) in feats.items()}


def _flat(x) -> Tensor:
    t = _as_tensor(x, "data", floating=True)
    return t.reshape(len(t), -1)


def raw() -> Callable[[Tensor], Tensor]:
    """The identity representation: the data flattened to ``(N, D)`` (the source's baseline)."""
    return _flat


def random_projection(dim: int, *, seed: int = 0) -> Callable[[Tensor], Tensor]:
    r"""A fixed Gaussian random projection :math:`\phi(x) = x R`, :math:`R_{ij} \sim N(0, 1/d)`, drawn
    from ``seed`` (the same on training and validation data).

    Parameters
    ----------
    dim : int
        The projection's dimension.
    seed : int
        The seed of :math:`R`.

    Returns
    -------
    callable
        ``x -> x R``, for ``x`` of shape ``(N, ...)`` (flattened).
    """
    if not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim must be a positive integer; got {dim!r}")

    def project(x) -> Tensor:
        x = _flat(x)
        g = torch.Generator().manual_seed(seed)
        r = torch.randn(x.shape[1], dim, generator=g, dtype=x.dtype) / dim**0.5
        return x @ r

    return project


def pca(fit_data, dim: int) -> Callable[[Tensor], Tensor]:
    """Projection on the top ``dim`` principal components of ``fit_data`` (labels unused); fit it on the
    training pool only.

    Parameters
    ----------
    fit_data : Tensor or ndarray, shape (N, ...)
        The data the components are fitted on.
    dim : int
        How many components.

    Returns
    -------
    callable
        ``x -> features`` of shape ``(N, dim)``.
    """
    x = _flat(fit_data)
    if not isinstance(dim, int) or not 1 <= dim <= min(x.shape):
        raise ValueError(f"dim must be an integer in 1..{min(x.shape)} (rank limit); got {dim!r}")
    if not torch.isfinite(x).all():
        raise ValueError("fit_data contains NaN or inf")
    mean = x.mean(0)
    _, _, vh = torch.linalg.svd(x - mean, full_matrices=False)
    components = vh[:dim].T.clone()

    def project(z) -> Tensor:
        z = _flat(z)
        return (z - mean.to(z.dtype)) @ components.to(z.dtype)

    return project
