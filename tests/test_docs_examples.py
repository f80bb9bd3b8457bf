"""The runnable examples in docs/csl.md, docs/units.md, docs/compare.md, docs/export.md and
docs/sigma_and_rd.md run as written."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"



@pytest.mark.parametrize("name", ["csl.md", "units.md", "compare.md", "export.md",
                                  "sigma_and_rd.md"])
def test_doc_examples_run(name):
    text = (DOCS / name).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, f"no python examples in {name}"
    namespace: dict = {"__name__": f"docs_{name}"}
    with contextlib.redirect_stdout(io.StringIO()):
        for block in blocks:  # one namespace per page: later blocks build on earlier ones
            exec(compile(block, f"{name}", "exec"), namespace)
