"""Measures on synthetic loss-data curves with closed-form areas and crossing points."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from pyrolik.curves import (
    LossDataCurve,
    best_representation,
    epsilon_from_baseline,
    epsilon_sample_complexity,
    mdl,
    measures_table,
    mi_proxy,
    sdl,
    validation_accuracy,
    validation_loss,
)

J = 10
POW2 = 2 ** np.arange(J + 1)  # 1, 2, 4, ..., 1024


def inverse_curve() -> LossDataCurve:
    """L(n) = 1/n on n = 2^j: right-rule area 1 + J/2, SDL at eps = 2^-m equal to m/2."""
    return LossDataCurve(POW2, 1.0 / POW2, name="1/n", num_classes=4)


def test_mdl_right_rule_closed_form():
    c = inverse_curve()
    assert mdl(c) == pytest.approx(1 + J / 2, rel=1e-14)
    for k in range(J + 1):
        assert mdl(c, 2**k) == pytest.approx(1 + k / 2, rel=1e-14)


def test_mdl_left_rule_closed_form():
    c = inverse_curve()
    # blocks (2^(j-1), 2^j] are charged L(2^(j-1)) = 2^-(j-1); the first block (0, 1] log K
    assert mdl(c, rule="left") == pytest.approx(math.log(4) + J, rel=1e-14)
    assert mdl(c, rule="left", loss_at_zero=3.0) == pytest.approx(3.0 + J, rel=1e-14)


def test_constant_curve_mdl_is_loss_times_n():
    c = LossDataCurve([3, 10, 70], [[0.7, 0.7, 0.7]])
    assert mdl(c) == pytest.approx(0.7 * 70)
    assert mdl(c, 10) == pytest.approx(0.7 * 10)


def test_unit_grid_gives_the_papers_sums_and_rules_bracket_them():
    """On every integer the right rule IS sum_i L(i); on a coarse grid right <= sum <= left."""
    n = np.arange(1, 1001)
    loss = 0.3 + 2.0 / np.sqrt(n)
    exact = loss.sum()
    eps = 0.4
    exact_sdl = np.clip(loss - eps, 0, None).sum()
    fine = LossDataCurve(n, loss)
    assert mdl(fine) == pytest.approx(exact, rel=1e-13)
    assert sdl(fine, eps) == pytest.approx(exact_sdl, rel=1e-13)
    grid = np.array([1, 3, 10, 30, 100, 300, 1000])
    coarse = LossDataCurve(grid, loss[grid - 1])
    assert mdl(coarse) < exact < mdl(coarse, rule="left", loss_at_zero=loss[0])
    assert sdl(coarse, eps) < exact_sdl < sdl(coarse, eps, rule="left", loss_at_zero=loss[0])


@pytest.mark.parametrize("m", [1, 3, 6, 10])
def test_sdl_closed_form_and_undetermined_before_reaching_epsilon(m):
    c = inverse_curve()
    eps = 2.0**-m
    assert sdl(c, eps) == pytest.approx(m / 2, rel=1e-13)
    for k in range(J + 1):
        value = sdl(c, eps, 2**k)
        if k < m:
            assert value == math.inf
        else:
            assert value == pytest.approx(m / 2, rel=1e-13)


@pytest.mark.parametrize("m", [0, 4, 9])
def test_epsilon_sample_complexity_is_first_grid_point_below(m):
    c = inverse_curve()
    assert epsilon_sample_complexity(c, 2.0**-m) == 2**m
    # a threshold strictly between two grid losses gives the next grid point (an upper bound)
    assert epsilon_sample_complexity(c, 0.75 * 2.0**-m) == 2 ** (m + 1)
    assert epsilon_sample_complexity(c, 0.75 * 2.0**-m, 2**m) == math.inf


def test_interpolated_crossing_is_exact_for_a_curve_linear_in_log_n():
    a, b, eps = 4.0, 0.4, 0.9
    n = np.unique(np.geomspace(5, 5000, 9).round())
    c = LossDataCurve(n, a - b * np.log(n))
    expected = math.exp((a - eps) / b)  # ~2300
    assert epsilon_sample_complexity(c, eps, interpolate=True) == pytest.approx(expected, rel=1e-12)
    grid = epsilon_sample_complexity(c, eps)
    assert grid == n[np.argmax(a - b * np.log(n) <= eps)] and grid >= expected


def test_seed_average_va_mi_and_epsilon_helper():
    loss = np.array([[2.0, 1.0, 0.2], [3.0, 1.4, 0.4]])
    acc = np.array([[0.3, 0.6, 0.9], [0.5, 0.7, 0.8]])
    c = LossDataCurve([10, 100, 1000], loss, acc, name="r")
    assert validation_loss(c, 100) == pytest.approx(1.2)
    assert validation_accuracy(c, 10) == pytest.approx(0.4)
    assert mi_proxy(c) == pytest.approx(0.3)
    assert epsilon_from_baseline(c, slack=0.05) == pytest.approx(0.35)
    assert epsilon_from_baseline(0.3, slack=0.0) == pytest.approx(0.3)
    assert c.stderr_loss[0] == pytest.approx(np.std([2.0, 3.0], ddof=1) / np.sqrt(2))


def two_representations():
    """A: learns fast, floor 0.5 (a VAE-like code); B: learns slowly, floor 0.05 (raw-like)."""
    n = 2 ** np.arange(1, 15)
    a = LossDataCurve(n, 0.5 + 1.0 / np.sqrt(n), name="A")
    b = LossDataCurve(n, 0.05 + 4.0 / np.sqrt(n), name="B")
    return n, {"A": a, "B": b}


def test_va_and_mdl_rankings_change_with_n_but_sdl_and_eps_sc_do_not():
    """The point of Whitney et al.: once determined, SDL and eps-SC stick; VA and MDL switch."""
    n, curves = two_representations()
    eps = 0.31  # between the floors; B first reaches it at n = 256 (4/sqrt(n) <= 0.26)
    table = measures_table(curves, eps)
    best = best_representation(table)
    assert best.index.tolist() == n.tolist()
    # VA: A better while 1/sqrt(n) + 0.5 < 4/sqrt(n) + 0.05, i.e. n < (3/0.45)^2 ~ 44
    assert (best["va_loss"][n < 44] == "A").all() and (best["va_loss"][n > 44] == "B").all()
    # MDL: the area under A is smaller early, under B later
    assert best["mdl"].iloc[0] == "A" and best["mdl"].iloc[-1] == "B"
    # SDL / eps-SC: undetermined for both before 256, then always B, with constant values
    sdl_b = table["sdl"].xs("B", level="representation")
    sc_b = table["eps_sc"].xs("B", level="representation")
    assert np.isinf(table["sdl"].xs("A", level="representation")).all()
    assert np.isinf(sdl_b[n < 256]).all() and np.isinf(sc_b[n < 256]).all()
    decided = n >= 256
    assert (sc_b[decided] == 256).all()
    assert np.allclose(sdl_b[decided], sdl_b[decided].iloc[0], rtol=0, atol=1e-12)
    for m in ("sdl", "eps_sc"):
        assert best[m][~decided].isna().all() and (best[m][decided] == "B").all()


def test_sdl_verdict_waits_for_the_partial_area_and_then_sticks():
    """A reaches eps first (n = 8) with a large area; B reaches it late (n = 512) with a small one.

    eps-SC decides for A at n = 8. SDL cannot decide while B's partial area (0.05 n) is below
    A's SDL (4 x 9.75 = 39), and at n = 512 B is determined at 256 x 0.05 = 12.8 < 39.
    """
    n = 2 ** np.arange(11)
    a = LossDataCurve(n, np.where(n < 8, 10.0, 0.2), name="A")
    b = LossDataCurve(n, np.where(n < 512, 0.3, 0.2), name="B")
    table = measures_table([a, b], 0.25)
    assert table.loc[(8, "A"), "sdl"] == pytest.approx(39.0)
    assert table.loc[(1024, "B"), "sdl"] == pytest.approx(12.8)
    partial_b = table["sdl_partial"].xs("B", level="representation")
    np.testing.assert_allclose(partial_b[n < 512], 0.05 * n[n < 512])
    assert (table["sdl_partial"] <= table["sdl"]).all()  # a lower bound, equal once determined
    best = best_representation(table)
    assert best["sdl"][n < 512].isna().all() and (best["sdl"][n >= 512] == "B").all()
    assert best["eps_sc"][n < 8].isna().all() and (best["eps_sc"][n >= 8] == "A").all()


def test_exact_ties_are_reported_as_ties():
    n = np.array([10, 100, 1000])
    a = LossDataCurve(n, [1.0, 0.2, 0.1], [[0.5, 0.9, 0.95]], name="a")
    b = LossDataCurve(n, [2.0, 0.25, 0.05], [[0.4, 0.9, 0.97]], name="b")
    best = best_representation(measures_table([a, b], 0.3))
    assert best.loc[100, "eps_sc"] == "a = b"  # both first reach 0.3 at n = 100
    assert best.loc[100, "va_accuracy"] == "a = b"
    assert best.loc[1000, "va_accuracy"] == "b" and best.loc[10, "va_loss"] == "a"


def test_measures_table_refuses_curves_on_different_grids():
    a = LossDataCurve([10, 20, 40, 80], [2.0, 1.0, 0.5, 0.3], name="a")
    b = LossDataCurve([10, 30, 60, 90], [2.0, 0.6, 0.4, 0.2], name="b")
    with pytest.raises(ValueError, match=r"grids differ up to n=80: \{'a': \[10, 20, 40, 80\], "
                       r"'b': \[10, 30, 60\]\}.*same sizes= to loss_data_curve"):
        measures_table([a, b], 0.45)
    table = measures_table({"a": a, "c": a.truncate(40)}, 0.45)  # one grid up to c's end
    assert table.index.tolist() == [(n, r) for n in (10, 20, 40) for r in "ac"]


def test_measures_table_layout():
    _, curves = two_representations()
    table = measures_table(curves, 0.31, ns=[16, 1024])
    assert list(table.columns) == ["va_loss", "va_accuracy", "mdl", "sdl", "sdl_partial", "eps_sc"]
    assert table.index.names == ["n", "representation"]
    assert table.index.tolist() == [(16, "A"), (16, "B"), (1024, "A"), (1024, "B")]
    assert table["va_accuracy"].isna().all()  # synthetic curves carry no accuracy
    assert table.attrs == {"epsilon": 0.31, "rule": "right"}
    assert table.loc[(1024, "B"), "mdl"] == pytest.approx(mdl(curves["B"], 1024))
    listed = measures_table(list(curves.values()), 0.31, ns=[16])
    pd.testing.assert_frame_equal(listed, table.loc[[16]])


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda c: mdl(c, 5), ValueError, "not a size"),
        (lambda c: mdl([1, 2]), TypeError, "LossDataCurve"),
        (lambda c: mdl(c, rule="middle"), ValueError, "rule"),
        (lambda c: mdl(LossDataCurve([1, 2], [1.0, 0.5]), rule="left"), ValueError, "loss_at_zero"),
        (lambda c: sdl(c, -0.1), ValueError, "epsilon"),
        (lambda c: sdl(c, float("nan")), ValueError, "epsilon"),
        (lambda c: sdl(c, "0.1"), TypeError, "epsilon"),
        (lambda c: epsilon_sample_complexity(c, True), TypeError, "epsilon"),
        (lambda c: epsilon_from_baseline(c, slack=-1), ValueError, "slack"),
        (lambda c: epsilon_from_baseline("raw"), TypeError, "baseline"),
        (lambda c: validation_accuracy(c, 4), ValueError, "no accuracy"),
        (lambda c: measures_table({"a": c}, 0.1, ns=[3]), ValueError, "shared sizes"),
        (lambda c: measures_table({}, 0.1), ValueError, "no curves"),
        (lambda c: measures_table("c", 0.1), TypeError, "dict"),
        (lambda c: best_representation(pd.DataFrame({"x": [1]})), TypeError, "measures_table"),
    ],
)
def test_bad_input_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call(inverse_curve())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"sizes": [1, 1, 2], "loss": [1, 1, 1]}, "strictly increasing"),
        ({"sizes": [0, 2], "loss": [1, 1]}, ">= 1"),
        ({"sizes": [1.5, 2], "loss": [1, 1]}, "integers"),
        ({"sizes": [1, 2], "loss": [1, 1, 1]}, "shape"),
        ({"sizes": [1, 2], "loss": [1, np.nan]}, "finite"),
        ({"sizes": [1, 2], "loss": [1, -1]}, ">= 0"),
        ({"sizes": [1, 2], "loss": [1, 1], "accuracy": [[1, 1, 1]]}, "accuracy"),
        ({"sizes": [1, 2], "loss": [1, 1], "num_classes": 1}, "num_classes"),
        ({"sizes": [], "loss": []}, "non-empty"),
    ],
)
def test_bad_curves(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LossDataCurve(**kwargs)
