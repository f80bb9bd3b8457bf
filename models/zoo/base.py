r"""The skeleton of every decoder-based model: a latent prior, a decoder, an observation site.

.. math::
    z \sim \mathcal N(0, I_d), \qquad x \mid z \sim p(x \mid g_\theta(z)),

where :math:`g_\theta` is a neural decoder and the observation model is a spherical Gaussian with
fixed standard deviation :math:`\sigma` (continuous data, Wu et al. 2017 section 5.2) or a Bernoulli
with logits :math:`g_\theta(z)` (binary data). An instance is a ``torch.nn.Module`` whose
``forward`` (also reachable as ``.model``) is a Pyro program of pyrolik's model convention (see
the README): first argument the
data ``x`` of shape ``(N, *event_shape)``, a plate ``"data"`` over dim 0, a latent site ``"z"`` and
one observed site ``"x"``. The decoder is registered with ``pyro.module("decoder", ...)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import pyro
import pyro.distributions as dist
import torch
from torch import Tensor, nn

from .decoders import check_sizes, mlp

__all__ = ["DecoderModel", "GaussianDecoderModel", "BernoulliDecoderModel", "check_sigma"]


def check_sigma(sigma: Any) -> float | Tensor:
    """Validate an observation-noise standard deviation (a positive finite scalar)."""
    if isinstance(sigma, Tensor):
        if sigma.numel() != 1:
            raise ValueError(f"sigma must be a scalar, got a tensor of shape {tuple(sigma.shape)}")
        value = float(sigma.detach())
    elif isinstance(sigma, (int, float)) and not isinstance(sigma, bool):
        value = float(sigma)
    else:
        raise TypeError(f"sigma must be a positive float, got {type(sigma).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"sigma must be positive and finite, got {value!r}")
    return sigma


class DecoderModel(nn.Module):
    """Base class: latent ``z ~ N(0, I)`` of size ``sizes[0]``, decoder ``sizes[0] -> sizes[-1]``.

    Subclasses set :attr:`kind` (the name a checkpoint records) and implement
    :meth:`_observe` (the observed site) and :meth:`decode` (the decoder's output in data space).

    Parameters
    ----------
    sizes : sequence of int
        Decoder layer widths, latent dimension first and number of pixels last.
    activation : str
        Hidden nonlinearity of the decoder (see :data:`models.zoo.decoders.ACTIVATIONS`).
    """

    kind: ClassVar[str] = ""
    _decoder_output: ClassVar[str | None] = None

    def __init__(self, sizes: Sequence[int], activation: str = "tanh") -> None:
        super().__init__()
        self.sizes = check_sizes(sizes, "decoder sizes")
        self.activation = activation
        self.decoder = mlp(self.sizes, activation, output=self._decoder_output)
        #: Training notes read from a checkpoint by :func:`models.zoo.serialization.load`.
        self.meta: dict[str, Any] = {}

    @property
    def latent_dim(self) -> int:
        """Dimension of the latent site ``z``."""
        return self.sizes[0]

    @property
    def data_dim(self) -> int:
        """Number of observed values per example (product of the event shape)."""
        return self.sizes[-1]

    @property
    def param_dtype(self) -> torch.dtype:
        """Floating dtype of the network weights."""
        return next(self.decoder.parameters()).dtype

    def config(self) -> dict[str, Any]:
        """Constructor arguments, as recorded in a checkpoint (plain Python values only)."""
        return {"sizes": list(self.sizes), "activation": self.activation}

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, sizes={self.sizes}"

    # --- the Pyro program -------------------------------------------------------------------
    def _check_x(self, x: Tensor) -> None:
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor of shape (N, {self.data_dim}), got "
                            f"{type(x).__name__}")
        if not x.is_floating_point():
            raise TypeError(f"x must be a floating tensor, got dtype {x.dtype}; use x.float()")
        if x.dim() < 2 or math.prod(x.shape[1:]) != self.data_dim:
            raise ValueError(
                f"x has shape {tuple(x.shape)} but the model observes {self.data_dim} values per "
                f"example: pass x of shape (N, {self.data_dim}) (or (N, *event_shape) with "
                f"{self.data_dim} values per example)"
            )

    def _decoder_out(self, z: Tensor, x: Tensor) -> Tensor:
        """Run the decoder on ``z`` (any leading shape) and shape the output like one row of x."""
        decoder = pyro.module("decoder", self.decoder)
        out = decoder(z.to(self.param_dtype)).to(x.dtype)
        return out.reshape(out.shape[:-1] + x.shape[1:])

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> None:
        """The Pyro model: ``z ~ N(0, I)`` and the observed site ``"x"``, in a plate over dim 0."""
        self._check_x(x)
        d = self.latent_dim
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(x.new_zeros(d), x.new_ones(d)).to_event(1))
            self._observe(x, self._decoder_out(z, x), *args, **kwargs)

    def model(self, x: Tensor, *args: Any, **kwargs: Any) -> None:
        """Alias of calling the instance: the Pyro model (Pyro's ``vae.model`` spelling)."""
        return self(x, *args, **kwargs)

    # Subclasses narrow these signatures to their own keywords (``sigma=``, or none).
    def _observe(self, x: Tensor, out: Tensor, *args: Any, **kwargs: Any) -> None:  # pragma: no cover
        raise NotImplementedError

    # --- data space -----------------------------------------------------------------------
    def decode(self, z: Tensor) -> Tensor:  # pragma: no cover
        """The decoder's output in data space (mean pixel values), shape ``(..., data_dim)``."""
        raise NotImplementedError

    def prior_sample(self, num_samples: int, generator: torch.Generator | None = None) -> Tensor:
        """Draw ``num_samples`` latents from the prior, shape ``(num_samples, latent_dim)``."""
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples <= 0:
            raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
        device = next(self.decoder.parameters()).device
        return torch.randn(num_samples, self.latent_dim, generator=generator,
                           dtype=self.param_dtype, device=device)

    @torch.no_grad()
    def sample(
        self, num_samples: int, generator: torch.Generator | None = None, *, noise: bool = False,
        **kwargs: Any,
    ) -> Tensor:
        """Draw images: the decoder's mean at prior latents, or with ``noise=True`` a draw of x."""
        mean = self.decode(self.prior_sample(num_samples, generator))
        return self._add_noise(mean, generator, **kwargs) if noise else mean

    def _add_noise(self, mean: Tensor, generator: torch.Generator | None, *args: Any,
                   **kwargs: Any) -> Tensor:
        raise NotImplementedError  # pragma: no cover


class GaussianDecoderModel(DecoderModel):
    r"""Decoder with a sigmoid output and a spherical Gaussian observation site of fixed sigma.

    .. math:: x \mid z \sim \mathcal N(g_\theta(z), \sigma^2 I), \qquad g_\theta(z) \in [0, 1]^D.

    ``sigma`` is a model keyword: ``model(x, sigma=0.05)``; when omitted, the instance's
    :attr:`sigma` is used (the value chosen on validation data for a shipped checkpoint, see
    :func:`models.training.sigma.choose_sigma` and figure 2(a) of Wu et al. 2017).
    """

    _decoder_output = "sigmoid"

    def __init__(self, sizes: Sequence[int], activation: str = "tanh", sigma: float = 0.05) -> None:
        super().__init__(sizes, activation)
        self.sigma = float(check_sigma(sigma))

    def config(self) -> dict[str, Any]:
        return {**super().config(), "sigma": self.sigma}

    def forward(self, x: Tensor, sigma: float | Tensor | None = None) -> None:
        """The Pyro model; ``sigma`` defaults to :attr:`sigma`."""
        super().forward(x, sigma=self.sigma if sigma is None else check_sigma(sigma))

    def model(self, x: Tensor, sigma: float | Tensor | None = None) -> None:
        """Alias of calling the instance: the Pyro model."""
        return self(x, sigma=sigma)

    def _observe(self, x: Tensor, out: Tensor, sigma: float | Tensor = 0.05) -> None:
        if isinstance(sigma, Tensor):
            sigma = sigma.to(x)
        pyro.sample("x", dist.Normal(out, sigma).to_event(x.dim() - 1), obs=x)

    def decode(self, z: Tensor) -> Tensor:
        """Mean image :math:`g_\\theta(z)` in :math:`[0, 1]`."""
        return self.decoder(z.to(self.param_dtype))

    def _add_noise(self, mean: Tensor, generator: torch.Generator | None,
                   sigma: float | None = None) -> Tensor:
        s = self.sigma if sigma is None else float(check_sigma(sigma))
        return mean + s * torch.randn(mean.shape, generator=generator, dtype=mean.dtype,
                                      device=mean.device)


class BernoulliDecoderModel(DecoderModel):
    r"""Decoder whose last layer gives Bernoulli logits.

    .. math:: x_i \mid z \sim \mathrm{Bernoulli}(\mathrm{sigmoid}(g_\theta(z)_i)).
    """

    _decoder_output = None

    def forward(self, x: Tensor) -> None:
        """The Pyro model over binary data ``x`` (values 0 and 1)."""
        super().forward(x)

    def model(self, x: Tensor) -> None:
        """Alias of calling the instance: the Pyro model."""
        return self(x)

    def _observe(self, x: Tensor, out: Tensor) -> None:
        pyro.sample("x", dist.Bernoulli(logits=out).to_event(x.dim() - 1), obs=x)

    def decode(self, z: Tensor) -> Tensor:
        """Pixel probabilities :math:`\\mathrm{sigmoid}(g_\\theta(z))`."""
        return torch.sigmoid(self.decoder(z.to(self.param_dtype)))

    def _add_noise(self, mean: Tensor, generator: torch.Generator | None) -> Tensor:
        return torch.bernoulli(mean, generator=generator)
