"""One annealing run, the whole curve: log p(x) against sigma, rate-distortion."""

from __future__ import annotations

from pyrolik.distortion.anneal import rate_distortion, sigma_curve
from pyrolik.distortion.bounds import DistortionBDMC, distortion_bdmc
from pyrolik.distortion.curve import (
    OPTIMAL_SIGMA_WARNING,
    DistortionCurve,
    OptimalSigma,
    SigmaChoice,
)
from pyrolik.distortion.path import distortion_model, squared_error
from pyrolik.distortion.plots import plot_optimal_sigma, plot_rate_distortion, plot_sigma_curve

__all__ = ["sigma_curve", "rate_distortion", "distortion_bdmc", "distortion_model",
           "squared_error", "DistortionCurve", "DistortionBDMC", "SigmaChoice", "OptimalSigma",
           "OPTIMAL_SIGMA_WARNING", "plot_sigma_curve", "plot_optimal_sigma",
           "plot_rate_distortion"]
