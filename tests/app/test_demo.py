"""The README's first command: the demo runs end to end (tiny settings), writes what it says, shows
one progress display, prints its estimators' warnings with the table and an honest footer."""

from __future__ import annotations

import io

import pandas as pd
import pytest

import pyrolik
from pyrolik.app import demo, report
from pyrolik.app.demo import GAP_WARN, _footer, format_table, main
from pyrolik.app.report import StageProgress


def test_quick_demo_writes_table_results_and_plots(tmp_path, capsys):
    assert main(["--quick", "--output", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    for word in ("VAE", "GAN", "GMMN", "ais", "ais+encoder", "iwae", "lw", "kde", "BDMC gap"):
        assert word in out
    assert max(len(line) for line in out.splitlines()) <= 80
    for name in ("summary.csv", "estimates.png", "bdmc_vae.png", "posterior_gan.png",
                 "vae_ais.nc", "vae_bdmc.nc", "gan_kde.nc"):
        assert (tmp_path / name).stat().st_size > 0
    reloaded = pyrolik.load(tmp_path / "vae_bdmc.nc")
    assert reloaded.gap == reloaded.gap and len(reloaded.x) == 5  # summarised without rerunning
    # one progress display: a line per stage on a non-terminal stderr, no estimator's bar
    stages = len(demo._plan(demo.SETTINGS["quick"]))
    assert len(err.splitlines()) == stages + 1 and len(err) < 2000, err
    assert "%|" not in err and f"[{stages}/{stages}]" in err
    # 30 steps: the BDMC gaps are several nats, and the output says so with the warning's text
    table = pd.read_csv(tmp_path / "summary.csv")
    gaps = table["BDMC gap [nats]"].dropna()
    assert (gaps > GAP_WARN).any()
    assert "Warnings to act on (" in out and "the BDMC gap is" in out
    assert "bounds the error" not in out and "The BDMC gaps are large" in out
    # the header of the settings says how many steps the ais+encoder row ran
    assert "3 steps from the encoder" in out.replace("\n", " ")
    # and leads a VAE user to the encoder path, with the two estimates it compared
    vae = table[table["model"] == "VAE"].set_index("estimator")["log p(x) [nats]"]
    diff = vae["ais+encoder"] - vae["ais"]
    assert f"lower bound {abs(diff):.2f} nats" in out.replace("\n", " ")
    assert "start from the encoder" in out.replace("\n", " ")


def test_quiet_demo_has_no_progress(tmp_path, capsys, monkeypatch):
    calls = []

    def run(output, **kwargs):
        calls.append(kwargs)
        table = _table({"VAE": 0.3})
        table.attrs.update(warnings=[], settings=demo.SETTINGS["quick"])
        return table

    monkeypatch.setattr(demo, "run", run)
    assert main(["--quick", "--quiet", "--output", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and calls[0]["progress"] is False and "log p(x)" in out
    stream = _Terminal()
    progress = StageProgress([("only", 1.0)], enabled=False, stream=stream)
    with progress.stage():
        pass
    progress.close()
    assert stream.getvalue() == ""


def test_demo_prints_the_settings_it_ran_and_refuses_non_positive_sizes(tmp_path, capsys,
                                                                        monkeypatch):
    import importlib

    try:
        import pyrolik_models as models
    except ImportError:
        import models  # type: ignore[no-redef]
    digits = importlib.import_module(models.__name__ + ".train_digits")
    split = digits.digits_split
    monkeypatch.setattr(digits, "digits_split",
                        lambda **kw: (s := split(**kw))._replace(test=s.test[:3]))
    assert main(["--quick", "--quiet", "--examples", "5000", "--steps", "5", "--chains", "2",
                 "--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out.replace("\n", " ")
    assert "Settings: 3 test digits;" in out  # said 5000: the split had 3
    assert "with 3 steps gave a lower bound" in out  # was "3 steps, 1 times fewer,"
    table = pd.DataFrame({"model": "VAE", "estimator": ["ais", "ais+encoder"],
                          "log p(x) [nats]": 0.0})
    assert "with 20 steps, 30 times fewer, gave" in demo._encoder_note(table, 600, 20)[0]
    for flag in ("--examples", "--steps", "--chains"):
        with pytest.raises(SystemExit):
            main([flag, "0"])
        assert f"argument {flag}: expected a positive integer, got 0" in capsys.readouterr().err


def _table(gaps):
    rows = [{"model": m, "estimator": "ais", "bound": "lower", "log p(x) [nats]": -20.0,
             "stderr": 1.0, "MCSE": 0.1, "bits/dim": 1.0, "bits/dim (k)": 3.0,
             "BDMC gap [nats]": g, "seconds": 1.0} for m, g in gaps.items()]
    return pd.DataFrame(rows)


def test_footer_claims_the_gap_bounds_the_error_only_when_it_is_small(tmp_path):
    s = demo.SETTINGS["default"]
    small = _footer(_table({"VAE": 0.3, "GAN": 0.5}), s, tmp_path, 1.0)
    assert "bounds the error of AIS" in small.replace("\n", " ")
    large = _footer(_table({"VAE": 0.3, "GAN": 9.2}), s, tmp_path, 1.0).replace("\n", " ")
    assert "bounds the error" not in large and "GAN 9.2" in large and "VAE" not in large
    assert "20 steps from the encoder" in large  # default: num_steps // 30


def test_table_fits_80_columns_with_its_warnings():
    table = _table({"VAE": 0.3, "GMMN": 12.5})
    table.attrs["warnings"] = [("GMMN BDMC", "the BDMC gap is 12.50 nats: AIS has not converged "
                                "on this model; increase num_steps until the gap is small")]
    text = format_table(table)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "12.50" in text and "- GMMN BDMC: the BDMC gap is 12.50 nats" in text


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_stage_progress_is_one_bar_on_a_terminal():
    stream = _Terminal()
    progress = StageProgress([("first", 1.0), ("second", 3.0)], stream=stream, name="demo",
                             tick=0.01)
    with progress.stage():
        pass
    assert progress._bar.n == 250  # a quarter of the weight, in thousandths
    with progress.stage():
        pass
    with pytest.raises(RuntimeError, match="all 2 stages are done"), progress.stage():
        pass
    progress.close()
    text = stream.getvalue()
    assert "demo:" in text and "[2/2] second" in text and "\n" not in text.strip("\n")


def test_wide_numbers_still_fit_80_columns():
    table = _table({"VAE": 123.45})
    table.loc[0, ["log p(x) [nats]", "stderr", "MCSE", "seconds"]] = [-12345.67, 123.4, 1234.5,
                                                                       1234.0]
    assert max(len(line) for line in format_table(table).splitlines()) <= 80


def test_the_demo_says_each_warning_once_with_the_estimates_it_concerns():
    table = pd.DataFrame({"model": ["VAE"]})
    table.attrs["warnings"] = [("VAE BDMC", "forward: few chains"), ("VAE BDMC", "reverse: few chains"),
                               ("VAE ais", "few chains"), ("VAE iwae", "k-hat > 0.7"),
                               ("GAN BDMC", "the BDMC gap is 3.10 nats")]
    groups = report.group(table.attrs["warnings"]).act  # plain strings: all to act on
    assert groups == {"few chains": ["VAE BDMC forward", "VAE BDMC reverse", "VAE ais"],
                      "k-hat > 0.7": ["VAE iwae"], "the BDMC gap is 3.10 nats": ["GAN BDMC"]}
    empty = pd.DataFrame({key: [] for _, key, _ in demo._COLUMNS})  # no rows: only the warnings
    empty.attrs["warnings"] = table.attrs["warnings"]
    text = demo.format_table(empty)
    assert "Warnings to act on (3):" in text
    assert "- VAE BDMC forward, VAE BDMC reverse, VAE ais: few chains" in text
