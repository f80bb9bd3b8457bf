"""The bottom layer: pure tensor code that knows nothing of Pyro models, kernels or results.

:mod:`pyrolik.ops.stats` holds the importance statistics every estimator reduces its weights with
(log-mean-exp, Kish's ESS, the MCSE of :math:`\\log \\hat Z`, Pareto :math:`\\hat k`, running
weights); :mod:`pyrolik.ops.types` the type aliases shared across layers. As Pyro's ``pyro.ops`` sits
under ``poutine`` and ``infer``, every other subpackage may import this one and it imports none of them.
"""
