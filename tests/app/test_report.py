"""The demo and the command line show the warnings to act on in full and fold the remarks (Monte
Carlo noise, standing caveats of the settings) into one line that says where to read them; nothing
is lost: ``--all`` and ``result.warnings()`` give every message (issue 33 item 6)."""

from __future__ import annotations

import math

import pandas as pd
import torch

import pyrolik
from pyrolik.app import cli, commands, demo, report
from pyrolik.exceptions import REMARK, prefixed, remark, severity
from pyrolik.results import AISResult, BDMCResult

CAVEAT = ("the MCSE comes from 8 chains per example: it matches the spread of repeated runs on "
          "average (jackknife), but 8 weights cannot show whether rare draws dominate (Pareto "
          "k-hat needs 25 or more), so read it as a rough guide, not an error bar; use 25+ chains "
          "for an MCSE you can check")
KHAT = ("100 of 100 examples have Pareto k-hat > 0.7: their importance weights are dominated by a "
        "few draws and the estimate is unreliable (use more chains/samples, more annealing steps, "
        "or a better proposal)")


def _inverted(n):
    return remark(f"for {n} of 20 examples the upper bound is below the lower one within Monte "
                  "Carlo noise (at most 1.3 MCSE, limit 4): expected when the gap is small next "
                  "to the noise")


def _default_run_notes():
    """The warnings of the demo's default run before issue 33 (its 9 messages, 40 lines), with
    the severities their producers now give them."""
    notes = []
    for name in ("VAE", "GAN", "GMMN"):
        notes += [(f"{name} BDMC", prefixed(f"{leg}: ", remark(CAVEAT)))
                  for leg in ("forward", "reverse")]
        notes.append((f"{name} ais", remark(CAVEAT)))
        if name == "VAE":
            notes.append(("VAE ais+encoder", remark(CAVEAT)))
            notes.append(("VAE BDMC", remark("the BDMC gap is inverted (upper < lower by 0.0527 "
                                             "nats, 0.6 times its MCSE of 0.089): within Monte "
                                             "Carlo noise")))
            notes.append(("VAE iwae", KHAT.replace("100 of", "95 of", 1)))
        notes.append((f"{name} BDMC", _inverted({"VAE": 13, "GAN": 6, "GMMN": 9}[name])))
        if name == "GAN":
            notes.append(("GAN ais", remark("7 HMC proposals were non-finite (divergent) and "
                                            "rejected (7 of 480000 transitions)")))
        notes.append((f"{name} lw", KHAT))
    return notes


def test_group_sorts_by_severity_and_names_the_bdmc_leg():
    notes = [("VAE BDMC", prefixed("forward: ", remark("few chains"))),
             ("VAE BDMC", "reverse: acceptance collapsed"),
             ("VAE ais", remark("few chains")), ("VAE lw", "k-hat > 0.7"),
             ("GAN lw", "k-hat > 0.7")]
    act, remarks = report.group(notes)
    assert act == {"acceptance collapsed": ["VAE BDMC reverse"], "k-hat > 0.7": ["VAE lw", "GAN lw"]}
    assert remarks == {"few chains": ["VAE BDMC forward", "VAE ais"]}


def test_warning_lines_fold_the_remarks_into_one_line():
    lines = report.warning_lines(_default_run_notes(), where="pyrolik summary --all out/*.nc")
    text = "\n".join(lines)
    assert lines[0] == "Warnings to act on (2):"
    assert "- VAE iwae: 95 of 100 examples have Pareto k-hat > 0.7" in text
    assert "- VAE lw, GAN lw, GMMN lw: 100 of 100 examples have Pareto k-hat > 0.7" in text
    assert "MCSE comes from" not in text and "within Monte Carlo noise" not in text
    folded = [ln for ln in lines if ln.startswith("+ ")]
    assert len(folded) == 1 and folded[0].startswith("+ 6 remarks at the level of Monte Carlo")
    assert "see pyrolik summary --all out/*.nc" in " ".join(lines)
    assert max(map(len, lines)) <= 80 and len(lines) <= 12
    # --all: every message, the remarks marked as such
    every = "\n".join(report.warning_lines(_default_run_notes(), where="x", show_all=True))
    assert "Remarks (6" in every and "MCSE comes from 8 chains" in every.replace("\n  ", " ")
    assert "VAE BDMC forward, VAE BDMC reverse, VAE ais, VAE ais+encoder" in every.replace("\n  ", " ")
    # only remarks: no heading, the one item (wrapped at 80 columns); nothing: nothing
    only = report.warning_lines([("VAE ais", remark(CAVEAT))], where="x")
    assert only[0].startswith("+ 1 remark at the level") and len(only) == 2
    assert only[1].startswith("  ") and only[1].endswith("see x")
    assert report.warning_lines([], where="x") == []


def _table(rows):
    return pd.DataFrame([{"model": m, "estimator": e, "bound": "lower", "log p(x) [nats]": 20.0,
                          "stderr": 1.5, "MCSE": 0.3, "bits/dim": 3.0, "bits/dim (k)": 3.5,
                          "BDMC gap [nats]": 0.2 if e == "ais" else math.nan, "seconds": 5.0}
                         for m, e in rows])


def test_the_demo_first_screen_fits_one_screen_with_what_to_act_on(tmp_path):
    rows = [("VAE", e) for e in ("ais", "ais+encoder", "iwae", "lw", "kde")]
    rows += [(m, e) for m in ("GAN", "GMMN") for e in ("ais", "lw", "kde")]
    table = _table(rows)
    table.attrs["warnings"] = _default_run_notes()
    s = demo.SETTINGS["default"]
    screen = (demo.format_table(table, where=demo.WHERE.format(output=tmp_path)) + "\n\n"
              + demo._footer(table, s, tmp_path, 22.0))
    lines = screen.splitlines()
    assert len(lines) <= 40 and max(map(len, lines)) <= 80, screen
    assert "k-hat > 0.7" in screen and "+ 6 remarks" in screen
    assert f"pyrolik summary --all {tmp_path}/*.nc" in screen.replace("\n  ", " ")
    # before, the same warnings took 40 lines of their own
    before = sum(len(report.warning_lines([(lab, str(m))], where="x")) - 1
                 for m, lab in _ungrouped(_default_run_notes()))
    assert before > 30


def _ungrouped(notes):
    seen = {}
    for label, message in notes:
        seen.setdefault(str(message), label)
    return [(m, lab) for m, lab in seen.items()]


def _saved(tmp_path, name, lw):
    lw = torch.as_tensor(lw, dtype=torch.float64)
    r = AISResult(method="ais", log_likelihood=torch.logsumexp(lw, 0) - math.log(lw.shape[0]),
                  bound="lower", log_weights=lw, mcse=pyrolik.ops.stats.mcse_log_mean_exp(lw),
                  x=torch.zeros(lw.shape[1], 2))
    path = tmp_path / name
    pyrolik.save(r, path)
    return path, r


def test_summary_prints_what_to_act_on_and_folds_the_remarks(tmp_path, capsys):
    lw = torch.zeros(8, 3)
    lw[0, 1] = 5.0  # one chain dominates example 1's weights: to act on
    path, result = _saved(tmp_path, "r.nc", lw)
    assert [severity(m) for m in pyrolik.load(path).warnings()] == ["remark", "act"]
    assert cli.main(["summary", str(path)]) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert lines[0].startswith("pyrolik: warning: for 1 of 3 examples the weights are dominated "
                               "by one of the 8 chains")
    assert lines[1] == (f"pyrolik: note: 1 remark at the level of Monte Carlo noise or standing "
                        f"caveats of the settings (nothing to act on): see pyrolik summary --all "
                        f"{path}")
    assert len(lines) == 2 and "MCSE comes from" not in err and "log p(x)" in out
    assert cli.main(["summary", "--all", str(path)]) == 0
    _, err = capsys.readouterr()
    assert err.splitlines()[0].startswith("pyrolik: warning: for 1 of 3")
    assert err.splitlines()[1].startswith("pyrolik: remark: the MCSE comes from 8 chains")
    assert len(err.splitlines()) == 2


def test_stderr_lines_say_a_message_about_both_legs_once():
    both = [prefixed("forward: ", remark(CAVEAT)), prefixed("reverse: ", remark(CAVEAT)),
            "forward: HMC acceptance collapsed", "the BDMC gap is 3.10 nats"]
    lines = report.stderr_lines(both, where="W", show_all=True)
    assert lines == ["pyrolik: warning: forward: HMC acceptance collapsed",
                     "pyrolik: warning: the BDMC gap is 3.10 nats",
                     f"pyrolik: remark: forward, reverse: {CAVEAT}"]
    folded = report.stderr_lines(both, where="W")
    assert folded[-1].startswith("pyrolik: note: 1 remark") and folded[-1].endswith("see W")
    assert report.stderr_lines([], where="W") == []


def test_a_bdmc_result_folds_its_remarks_on_stderr(tmp_path, capsys):
    def leg(bound, shift):
        lw = torch.zeros(8, 2, dtype=torch.float64)
        return AISResult(method="ais", log_likelihood=torch.tensor([0.0, 1.0]) + shift,
                         bound=bound, log_weights=lw, mcse=torch.full((2,), 0.05),
                         direction="forward" if bound == "lower" else "reverse")

    r = BDMCResult(lower=leg("lower", 0.0), upper=leg("upper", -0.01), x=torch.zeros(2, 2),
                   latents={"z": torch.zeros(2, 1)})
    assert all(severity(m) == REMARK for m in r.warnings())  # caveats and an inverted gap in noise
    commands._warn(r.warnings(), tmp_path / "b.nc")  # what evaluate, bdmc and summary print
    _, err = capsys.readouterr()
    (line,) = err.splitlines()
    assert line.startswith("pyrolik: note: 3 remarks") and line.endswith(f"--all {tmp_path}/b.nc")
    commands._warn(r.warnings(), tmp_path / "b.nc", show_all=True)
    _, err = capsys.readouterr()
    assert err.splitlines()[0].startswith("pyrolik: remark: forward, reverse: the MCSE comes from")
    assert len(err.splitlines()) == 3
