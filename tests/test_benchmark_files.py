"""benchmarks/ holds what RESULTS.md cites: every script cited or imported by one that is, every
cited log and figure present, the page at most 300 lines."""

from __future__ import annotations

import ast
import glob
import re
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
RESULTS = (BENCH / "RESULTS.md").read_text()


def _imports(script: Path) -> set[str]:
    """The benchmark modules ``script`` imports (``_common``, ``benchmarks._common``, ...)."""
    names = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.removeprefix("benchmarks."))
        elif isinstance(node, ast.Import):
            names.update(a.name.removeprefix("benchmarks.") for a in node.names)
    return {n for n in names if (BENCH / f"{n}.py").exists()}


def test_every_script_is_cited_or_imported_by_a_cited_one():
    scripts = {p.stem: p for p in BENCH.glob("*.py")}
    kept = {name for name in scripts if f"{name}.py" in RESULTS}
    todo = list(kept)
    while todo:
        for name in _imports(scripts[todo.pop()]) - kept:
            kept.add(name)
            todo.append(name)
    assert sorted(set(scripts) - kept) == []


def test_the_logs_and_figures_it_cites_exist():
    cited = set(re.findall(r"(?:logs|figures)/[\w./*{},$-]+", RESULTS))
    missing = []
    for path in cited:
        path = re.sub(r"\$\w+", "*", path.rstrip(".,"))  # a shell variable: any value
        for name in _braces(path):
            if not glob.glob(str(BENCH / name)):
                missing.append(name)
    assert missing == []


def _braces(path: str) -> list[str]:
    """``a_{x,y}.png`` -> ``a_x.png``, ``a_y.png``."""
    m = re.search(r"\{([^}]*)\}", path)
    if m is None:
        return [path]
    return [n for part in m.group(1).split(",")
            for n in _braces(path[: m.start()] + part + path[m.end():])]


def test_the_page_is_at_most_300_lines():
    assert len(RESULTS.splitlines()) <= 300
