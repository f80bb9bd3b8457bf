"""The README's Python snippets run (at reduced settings), so the front page never rots."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_readme_python_snippets_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 2
    code = "\n".join(blocks)
    code = (code.replace("num_steps=200", "num_steps=10")
            .replace("pyrolik.bdmc(model, 20,", "pyrolik.bdmc(model, 3,")
            .replace("seed=0)", "seed=0, progress=False)"))
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)
    assert namespace["result"].log_likelihood.shape == (8,)
    assert namespace["sandwich"].gap == namespace["sandwich"].gap  # a number, not NaN
    out = capsys.readouterr().out  # the summaries were printed, the estimates in them
    assert "BDMC gap" in out and "(upper - lower)" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("log p(x) [nats]")]
    assert lines[0].split()[-1] == f"{namespace['result'].mean:.3f}"
    assert lines[1].split()[-1] == f"{namespace['sandwich'].gap:.3f}"
