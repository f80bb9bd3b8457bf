"""Models with known answers, the oracles the estimators are tested against.

:class:`LinearGaussian` (closed-form marginal and posterior), :class:`GlobalLinearGaussian` (a
global latent: closed-form evidence of a whole data set), :class:`MixturePriorLinearGaussian` (a
mixture-of-Gaussians prior, ``dist.MixtureSameFamily``: closed-form mixture marginal and posterior),
the 1-D models of :mod:`.quadrature` (marginal by quadrature, exact posterior draws), a small
:class:`RBM` (exact log-likelihood by enumeration) and :class:`LinearStateSpace` (one observed site
per step, exact by the Kalman filter).
"""

from .global_gaussian import GlobalLinearGaussian
from .linear_gaussian import LinearGaussian
from .mixture_prior import MixturePriorLinearGaussian
from .quadrature import BernoulliDecoder, BetaLatent, BimodalDecoder, UniformLatent
from .rbm import RBM, binary_states
from .state_space import LinearStateSpace

__all__ = ["BernoulliDecoder", "BetaLatent", "BimodalDecoder", "GlobalLinearGaussian",
           "LinearGaussian", "LinearStateSpace", "MixturePriorLinearGaussian", "RBM", "UniformLatent",
           "binary_states"]
