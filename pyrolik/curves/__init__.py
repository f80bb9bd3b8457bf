"""Loss-data curves for representations: VA, MI, MDL, SDL and epsilon sample complexity.

>>> from pyrolik import curves                                    # doctest: +SKIP
>>> (tr, va) = curves.train_valid_split(x, y, valid_size=0.2)     # doctest: +SKIP
>>> reps = {"raw": curves.raw(), "pca8": curves.pca(tr[0], 8)}    # doctest: +SKIP
>>> lc = curves.evaluate_representations(reps, tr, va)            # doctest: +SKIP
>>> eps = curves.epsilon_from_baseline(lc["raw"], slack=0.1)      # doctest: +SKIP
>>> curves.measures_table(lc, eps)                                # doctest: +SKIP
"""

from __future__ import annotations

from pyrolik.curves.curve import (
    LossDataCurve,
    default_lr,
    default_sizes,
    evaluate_representations,
    loss_data_curve,
    pca,
    random_projection,
    raw,
    train_valid_split,
)
from pyrolik.curves.measures import (
    best_representation,
    epsilon_from_baseline,
    epsilon_sample_complexity,
    mdl,
    measures_table,
    mi_proxy,
    plot_curves,
    plot_loss_data,
    sdl,
    validation_accuracy,
    validation_loss,
)

__all__ = ["LossDataCurve", "default_lr", "default_sizes", "evaluate_representations",
           "loss_data_curve", "train_valid_split", "best_representation", "epsilon_from_baseline",
           "epsilon_sample_complexity", "mdl", "measures_table", "mi_proxy", "sdl",
           "validation_accuracy", "validation_loss", "plot_curves", "plot_loss_data", "pca",
           "random_projection", "raw"]
