"""``pyrolik.diagnostics.to_elpd``: Pareto k-hat per example for ``az.plot_khat``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from tests.export_cases import build


@pytest.mark.filterwarnings("ignore::matplotlib.MatplotlibDeprecationWarning")  # ArviZ 0.23 on mpl 3.11
def test_plot_khat_draws_the_pareto_k_of_every_example(lg_runs):
    import arviz as az
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pyrolik.diagnostics import to_elpd

    _, runs = lg_runs
    r = runs[100]
    elpd = to_elpd(r.to_inference_data())
    assert_array_equal(elpd.pareto_k.values, r.khat.numpy())
    assert elpd.good_k == pytest.approx(min(1 - 1 / math.log10(64), 0.7))
    assert elpd.n_samples == 64 and "not leave-one-out" in str(elpd)
    np.testing.assert_allclose(elpd["elpd_evidence"], float(r.log_likelihood.sum()))
    ax = az.plot_khat(elpd)
    assert len(ax.collections[0].get_offsets()) == r.num_examples
    plt.close("all")
    bd = to_elpd(build()["bdmc"].to_inference_data(), bound="upper")
    assert bd.n_data_points == 3
    with pytest.raises(ValueError, match="no evidence group"):
        to_elpd(build()["kde"])
