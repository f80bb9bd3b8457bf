"""The runnable example in docs/curves.md runs as written (and makes its plot)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import matplotlib.pyplot as plt

DOC = Path(__file__).resolve().parents[2] / "docs" / "curves.md"


def test_curves_doc_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example saves curves.png in the working directory
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 2
    namespace: dict = {"__name__": "docs_curves"}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            for block in blocks:
                exec(compile(block, "docs/curves.md", "exec"), namespace)
    finally:
        plt.close("all")
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    assert namespace["table"].shape == (24, 6)
