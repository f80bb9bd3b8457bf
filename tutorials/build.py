"""Build the tutorial notebooks from their cell sources and execute them, storing the outputs.

    PYROLIK_DATA=/path/to/data python tutorials/build.py   # all notebooks, full settings, stored
    python tutorials/build.py 01 02        # some of them
    python tutorials/build.py --check      # exit 1 if a stored notebook differs from its source

Tutorial 05 evaluates MNIST-test representations when ``PYROLIK_DATA`` names the folder holding
``mnist_test.npz`` and says it skipped them otherwise: set it when rebuilding.

The cells live in ``sources.py`` (and ``sources_representations.py``, ``sources_sigma.py``); a
notebook is never edited by hand. Rebuild after changing a source or anything that changes the library's numbers (the lead
rebuilds them all after merging). ``tests/integration/test_tutorials.py`` fails when a stored notebook's cells
differ from its source or its outputs carry warnings, and executes every notebook at the small
settings each picks when ``CI`` is set (``smoke_test``), so none of them rots. Needs Jupyter's
kernel: ``pip install -e ".[tutorials]"``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).parent


def notebook(cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for kind, src in cells:
        src = src.strip("\n")
        nb.cells.append(nbformat.v4.new_markdown_cell(src) if kind == "md"
                        else nbformat.v4.new_code_cell(src))
    return nb


def sources() -> dict[str, list[tuple[str, str]]]:
    """Every notebook's cells, by notebook name."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    from sources import NOTEBOOKS

    return NOTEBOOKS


def cells_of(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """What a notebook says, without its outputs: ``(cell type, source)`` per cell."""
    return [(c.cell_type, c.source) for c in nb.cells]


def stale() -> list[str]:
    """Names of the stored notebooks whose cells differ from their sources (or that are missing)."""
    out = []
    for name, cells in sources().items():
        path = HERE / f"{name}.ipynb"
        if not path.exists() or cells_of(nbformat.read(path, as_version=4)) != cells_of(
                notebook(cells)):
            out.append(name)
    return out


def execute(nb: nbformat.NotebookNode, timeout: int = 1800) -> nbformat.NotebookNode:
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(HERE)}}).execute()
    return nb


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help="notebook name prefixes (default: all)")
    p.add_argument("--check", action="store_true",
                   help="only check that every stored notebook matches its source")
    p.add_argument("--execute", action="store_true",
                   help="build and execute (the default; kept for explicit scripts)")
    args = p.parse_args(argv)
    if args.check:
        names = stale()
        for name in names:
            print(f"{name}.ipynb differs from its source: run python tutorials/build.py {name[:2]}")
        return 1 if names else 0
    import pyrolik

    os.environ.pop("CI", None)  # the kernels inherit it: stored outputs use the full settings
    for name, cells in sources().items():
        if args.names and not any(name.startswith(a) for a in args.names):
            continue
        t0 = time.perf_counter()
        nb = execute(notebook(cells))
        nb.metadata["pyrolik"] = {"version": pyrolik.__version__,
                                  "built": datetime.date.today().isoformat()}
        nbformat.write(nb, HERE / f"{name}.ipynb")
        print(f"{name}.ipynb executed in {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
