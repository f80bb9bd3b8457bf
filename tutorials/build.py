"""Execute the tutorials' text notebooks (``NN_name.md``, MyST via jupytext) into ``NN_name.ipynb``.

    PYROLIK_DATA=/path/to/data python tutorials/build.py   # all notebooks, full settings, stored
    python tutorials/build.py 01 02        # some of them
    python tutorials/build.py --check      # exit 1 if a stored notebook differs from its .md

Each tutorial is written as a text notebook, ``tutorials/NN_name.md`` (``jupytext --to ipynb``
reads it; Jupyter opens it with jupytext installed); the ``.ipynb`` beside it is that notebook
executed, with its outputs stored, and is never edited by hand. Tutorial 05 evaluates MNIST-test
representations when ``PYROLIK_DATA`` names the folder holding ``mnist_test.npz`` and says it
skipped them otherwise: set it when rebuilding. Rebuild after changing a ``.md`` or anything that
changes the library's numbers. ``tests/integration/test_tutorials.py`` fails when a stored
notebook's cells differ from its ``.md`` or its outputs carry warnings, and executes every ``.md``
at the small settings it picks when ``CI`` is set (``smoke_test``). Needs Jupyter's kernel and
jupytext: ``pip install -e ".[tutorials]"``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).parent
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def read(path: Path) -> nbformat.NotebookNode:
    """The text notebook at ``path`` as a notebook without outputs (jupytext's header dropped)."""
    nb = jupytext.read(path)
    nb.metadata = nbformat.NotebookNode(kernelspec=dict(KERNELSPEC))
    return nb


def sources() -> dict[str, Path]:
    """Every tutorial's text notebook, by name (``01_quickstart`` -> ``tutorials/01_quickstart.md``)."""
    return {p.stem: p for p in sorted(HERE.glob("[0-9][0-9]_*.md"))}


def cells_of(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """What a notebook says, without its outputs: ``(cell type, source)`` per cell."""
    return [(c.cell_type, c.source) for c in nb.cells]


def stale() -> list[str]:
    """Names of the stored notebooks whose cells differ from their text notebooks (or missing)."""
    out = []
    for name, md in sources().items():
        path = HERE / f"{name}.ipynb"
        if not path.exists() or cells_of(nbformat.read(path, as_version=4)) != cells_of(read(md)):
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
                   help="only check that every stored notebook matches its text notebook")
    args = p.parse_args(argv)
    if args.check:
        names = stale()
        for name in names:
            print(f"{name}.ipynb differs from {name}.md: run python tutorials/build.py {name[:2]}")
        return 1 if names else 0
    import pyrolik

    os.environ.pop("CI", None)  # the kernels inherit it: stored outputs use the full settings
    for name, md in sources().items():
        if args.names and not any(name.startswith(a) for a in args.names):
            continue
        t0 = time.perf_counter()
        nb = execute(read(md))
        nb.metadata["pyrolik"] = {"version": pyrolik.__version__,
                                  "built": datetime.date.today().isoformat()}
        nbformat.write(nb, HERE / f"{name}.ipynb")
        print(f"{name}.ipynb executed in {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
