"""Every tutorial's text notebook (``tutorials/NN_name.md``) executes at the small settings it picks
when CI is set, the stored ``.ipynb`` holds the same cells (``tutorials/build.py``), and no output
carries a warning."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = ROOT / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("*.ipynb"))
TEXT_NOTEBOOKS = sorted(TUTORIALS.glob("[0-9][0-9]_*.md"))


def _build():
    spec = importlib.util.spec_from_file_location("tutorials_build", TUTORIALS / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _warnings(nb) -> list[str]:
    """Text of the outputs that are warnings (a stderr stream naming one, or a warning line)."""
    out = []
    for i, cell in enumerate(nb.cells):
        for o in cell.get("outputs", []) if cell.cell_type == "code" else []:
            text = o.get("text", "") if o.get("output_type") == "stream" else ""
            if o.get("name") == "stderr" and "Warning" in text or "Warning:" in text:
                out.append(f"cell {i} ({cell.source[:60]!r}...): {text[:300]}")
    return out


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("path", TEXT_NOTEBOOKS, ids=[p.stem for p in TEXT_NOTEBOOKS])
def test_notebook_executes(path, monkeypatch):
    monkeypatch.setenv("CI", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # the kernel imports the checkout's pyrolik, as the tests do, whatever copy is installed
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT),
                                                                   os.environ.get("PYTHONPATH")])))
    nb = _build().read(path)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(TUTORIALS)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    assert not _warnings(nb)


def test_stored_notebooks_match_their_sources():
    """A text notebook edited without rebuilding its .ipynb fails here (python tutorials/build.py)."""
    build = _build()
    assert len(TEXT_NOTEBOOKS) >= 3
    assert {f"{name}.ipynb" for name in build.sources()} == {p.name for p in NOTEBOOKS}
    assert build.stale() == [], "rebuild with: python tutorials/build.py " + " ".join(
        n[:2] for n in build.stale())


def test_a_changed_source_is_seen_as_stale(monkeypatch, tmp_path):
    build = _build()
    name, md = next(iter(build.sources().items()))
    monkeypatch.setattr(build, "HERE", tmp_path)
    (tmp_path / md.name).write_text(md.read_text())
    nbformat.write(build.read(md), tmp_path / f"{name}.ipynb")
    assert build.stale() == []
    (tmp_path / md.name).write_text(md.read_text() + "\n```{code-cell}\n# edited\n```\n")
    assert build.stale() == [name]
    (tmp_path / f"{name}.ipynb").unlink()
    assert build.stale() == [name]


def test_stored_outputs_carry_no_warnings():
    for path in NOTEBOOKS:
        assert not _warnings(nbformat.read(path, as_version=4)), path.name


def test_stored_notebooks_have_outputs():
    """Notebooks are stored executed, so they read well on a web page."""
    assert len(NOTEBOOKS) >= 3
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert sum(bool(c.get("outputs")) for c in code) >= len(code) // 2, path.name
