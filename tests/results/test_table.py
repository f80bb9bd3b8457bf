"""``print(result.summary())`` shows the estimate at 80 columns, in a terminal and in a log file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import pyrolik
from pyrolik.results.table import Summary, format_value, render
from tests import scale_models as sm

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ais():
    return pyrolik.ais(sm.model, sm.sample(5), num_steps=6, num_chains=3, seed=0, progress=False)


@pytest.fixture(scope="module")
def sandwich():
    return pyrolik.bdmc(sm.model, 4, data_shape=(5,), num_steps=6, num_chains=3, seed=0,
                        progress=False)


def _line(text: str, field: str) -> str:
    (line,) = [ln for ln in text.splitlines() if ln.startswith(field)]
    return line


def test_printed_summary_shows_the_estimate_at_80_columns(ais, capsys):
    with pd.option_context("display.width", 80, "display.max_columns", 20):
        print(ais.summary())
    text = capsys.readouterr().out
    assert "..." not in text and max(len(ln) for ln in text.splitlines()) <= 80
    assert _line(text, "log p(x) [nats]").split()[-1] == f"{ais.mean:.3f}"
    assert _line(text, "stderr").split()[-1] == f"{ais.stderr:.3f}"
    assert _line(text, "examples").split()[-1] == "5"
    # still the DataFrame of API.md: indexed by method, one column per quantity
    s = ais.summary()
    assert isinstance(s, pd.DataFrame) and s.loc["ais", "log p(x) [nats]"] == ais.mean
    assert "..." in s.to_string() or "log p(x) [nats]" in s.to_string()  # pandas' own layout


def test_printed_bdmc_summary_shows_bounds_and_gap(sandwich, capsys):
    with pd.option_context("display.width", 80):
        print(sandwich.summary())
    text = capsys.readouterr().out
    assert "..." not in text and max(len(ln) for ln in text.splitlines()) <= 80
    values = _line(text, "log p(x) [nats]").split()[-3:]
    assert values == [f"{v:.3f}" for v in (sandwich.lower.mean, sandwich.upper.mean, sandwich.gap)]
    assert "BDMC gap" in text and "(upper - lower)" in text  # the header wraps, never elides
    assert _line(text, "divergences").split()[-1] == "-"  # the gap has no divergences, not NaN


def test_summary_in_a_log_file(tmp_path):
    """Not a terminal: pandas falls back to 80 columns; the number must still be there."""
    code = ("import pyrolik; from tests import scale_models as sm; "
            "r = pyrolik.likelihood_weighting(sm.model, sm.sample(4), num_samples=30, seed=0, "
            "progress=False); print(r.summary()); print(repr(r.mean))")
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, stdout=out, check=True,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                            "OMP_NUM_THREADS": "1"})
    text = log.read_text()
    mean = float(text.splitlines()[-1])
    assert _line(text, "log p(x) [nats]").split()[-1] == f"{mean:.3f}"
    assert "..." not in text


def test_wide_tables_go_to_blocks_not_ellipses():
    frame = pd.DataFrame({"log p(x) [nats]": [-1.0 * i for i in range(9)],
                          "stderr": [0.001234] * 9}, index=[f"estimator number {i}" for i in range(9)])
    frame.index.name = "method"
    text = render(frame, width=80)
    assert max(len(ln) for ln in text.splitlines()) <= 80
    assert text.count("log p(x) [nats]") >= 2  # more than one block
    for i in range(9):
        assert f"estimator number {i}" in text.replace("\n", " ") or str(i) in text
    assert "0.001234" in text and "..." not in text
    assert str(Summary(frame)) == text


@pytest.mark.parametrize("value,count,expected", [
    (-24.81234, False, "-24.812"), (0.001234, False, "0.001234"), (3, False, "3"),
    (4.0, True, "4"), (float("nan"), False, "-"), (float("-inf"), False, "-inf"),
    ("lower", False, "lower"), (123456789.0, False, "1.235e+08"), (0.0, False, "0"),
])
def test_cells(value, count, expected):
    assert format_value(value, count=count) == expected


def test_a_long_quantity_name_keeps_one_block():
    """'mean MCSE (K=16 chains: rough below 25)' beside three BDMC columns: 81 characters with two
    spaces between columns, so they get one: still one block, still within 80 columns."""
    frame = pd.DataFrame({"log p(x) [nats]": [-1.0, -0.5, 0.5],
                          "mean MCSE (K=16 chains: rough below 25)": [0.1, 0.2, float("nan")]},
                         index=["forward AIS (lower)", "reverse AIS (upper)",
                                "BDMC gap (upper - lower)"])
    text = render(frame)
    assert text.count("log p(x) [nats]") == 1 and max(len(ln) for ln in text.splitlines()) <= 80
