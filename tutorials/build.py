"""Build the tutorial notebooks from their cell sources and execute them, storing the outputs.

    python tutorials/build.py            # all notebooks, full settings
    python tutorials/build.py 01 02      # some of them

Each notebook reads ``smoke_test = "CI" in os.environ`` and shrinks its settings when set; the test
suite (``tests/test_tutorials.py``) executes every notebook that way so none of them rots.
"""

from __future__ import annotations

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


def execute(nb: nbformat.NotebookNode, timeout: int = 1800) -> nbformat.NotebookNode:
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(HERE)}}).execute()
    return nb


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(HERE))
    from sources import NOTEBOOKS

    for name, cells in NOTEBOOKS.items():
        if argv and not any(name.startswith(a) for a in argv):
            continue
        t0 = time.perf_counter()
        nb = execute(notebook(cells))
        nbformat.write(nb, HERE / f"{name}.ipynb")
        print(f"{name}.ipynb executed in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
