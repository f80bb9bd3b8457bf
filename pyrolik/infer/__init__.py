"""The estimators: AIS, BDMC, evidence, budget, importance sampling, KDE and CSL."""

from pyrolik.infer.annealing import ais, posterior_samples, reverse_ais
from pyrolik.infer.conservative import (
                                        AlternatingChain,
                                        biased_csl,
                                        block_gibbs,
                                        csl,
                                        encoder_decoder,
                                        iterate_chain,
                                        prior_samples,
                                        sample_chain,
)
from pyrolik.infer.global_latents import evidence, evidence_bdmc
from pyrolik.infer.importance import iwae, likelihood_weighting
from pyrolik.infer.parzen import kde
from pyrolik.infer.sandwich import Simulated, bdmc, bdmc_convergence, simulate
from pyrolik.infer.tolerance import Budget, budget

__all__ = ["ais", "reverse_ais", "simulate", "bdmc", "bdmc_convergence", "evidence",
           "evidence_bdmc", "budget", "iwae", "likelihood_weighting", "kde", "csl", "biased_csl",
           "posterior_samples", "Simulated", "Budget", "AlternatingChain", "block_gibbs",
           "encoder_decoder", "iterate_chain", "sample_chain", "prior_samples"]
