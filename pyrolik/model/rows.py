r"""Per-example densities: the density of row ``n`` must depend on row ``n`` only (``docs/idioms.md``)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["check_rows_independent"]


def check_rows_independent(program: Any, u: Tensor, full: Tensor) -> None:
    """Refuse a model whose per-row density depends on the other rows of its batch.

    ``program`` is a :class:`~pyrolik.model.evaluation.Program`, ``u`` ``(rows, d)`` a point of its
    latent space and ``full`` ``(2, rows)`` its ``(log p(u), log p(x | u))`` there in the full batch.
    """
    rows, layout = program.rows, program.layout
    if layout.num_examples > 1:  # other examples of the batch: the last two rows, reversed
        index = torch.arange(rows - 1, rows - 1 - min(rows - 1, 2), -1, device=u.device)
        probe, probe_u, probed = program.on_rows(index), u[index], len(index)
    else:  # every row is a copy of one example: run it before a row of other data
        index = torch.full((2,), rows - 1, dtype=torch.long, device=u.device)
        x = program.x[index]
        x = torch.stack([x[0], x[1].reshape(-1).roll(1).reshape(x.shape[1:])])
        probe, probe_u, probed = program.on_rows(index, x), u[index], 1
        probe_u = torch.stack([probe_u[0], 0.5 * probe_u[1] + 0.25])
    try:
        with torch.no_grad(), torch.random.fork_rng():
            alone = torch.stack(probe.log_prior_and_obs(probe_u))[:, :probed]
    except Exception as err:  # noqa: BLE001 - a model that needs its batch as it is
        if probed == 1:
            return  # it fails on made-up data: nothing learnt about the user's rows
        raise ValueError(
            f"the model fails when run on {probed} rows of its batch ({type(err).__name__}: "
            f"{str(err).strip()[:200]}): pyrolik runs the examples in batches of any size "
            "(num_chains x batch_size rows, the last batch smaller), so the model must run on any "
            "number of rows"
        ) from err
    want = full[:, index[:probed]]
    if _close(alone, want):
        return
    gap = (alone - want).abs().nan_to_num(0.0)
    term, j = divmod(int(gap.reshape(-1).argmax()), probed)
    chain, example = divmod(int(index[j]), layout.num_examples)
    what = "log p(z)" if term == 0 else f"log p(x | z) (observed sites {list(layout.observed)})"
    raise ValueError(
        f"the model's density of one example depends on the other rows of its batch: {what} of "
        f"example {example} (chain {chain}) is {float(want[term, j]):.6g} in the batch of {rows} "
        f"rows and {float(alone[term, j]):.6g} in a batch of 2 rows at the same latents. Something "
        "in the model reads across the plate over the examples: a batch statistic (x.mean(0), "
        "z - z.mean(0), F.batch_norm(training=True), a softmax over dim 0), the rows' positions "
        "(torch.arange(len(x)), noise drawn after torch.manual_seed), or one row's latent in "
        "another row's density. pyrolik folds chains and batches into the plate, so each "
        "example's density must depend on its own row only: compute such statistics once, outside "
        "the model, and pass them as a shared argument (pyrolik.model.shared(t))"
    )


def _close(a: Tensor, b: Tensor) -> bool:
    """Equal up to the rounding of a model computed in float32 (whatever the dtype of its output):
    another batch shape may change the order of a matrix product's sums."""
    tol = 1e-5 if torch.finfo(a.dtype).bits >= 32 else 1e-2
    return bool(torch.allclose(a, b, rtol=tol, atol=tol, equal_nan=True))
