"""Sphinx configuration: the API reference (autodoc + numpydoc), the markdown guides (MyST) and the
tutorials (myst-nb: the executed ``tutorials/*.ipynb`` with their stored outputs, never re-run).

Build: ``pip install -e ".[docs]" && sphinx-build -W --keep-going -b html docs docs/_build/html``
(``.ci/run`` does this with warnings as errors).
"""

from __future__ import annotations

import os
import sys
import warnings

sys.path.insert(0, os.path.abspath(".."))
warnings.filterwarnings("ignore", category=FutureWarning, module="arviz")

import pyrolik  # noqa: E402

project = "pyrolik"
author = "The pyrolik developers"
copyright = "2026, The pyrolik developers"  # noqa: A001
release = version = pyrolik.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_nb",  # MyST markdown for the guides, and the stored notebooks
]
root_doc = "index"
# docs/tutorials links to ../tutorials: the stored .ipynb are rendered, their .md sources are not
exclude_patterns = ["_build", "tutorials/*.md", "tutorials/.ipynb_checkpoints"]
nb_execution_mode = "off"

autodoc_member_order = "bysource"
autodoc_typehints = "none"          # numpydoc's Parameters sections carry the types
autosummary_generate = False
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3
# the guides link to files of the repository outside docs/ (README, benchmarks/RESULTS.md, models/):
# on GitHub they resolve; in the rendered reference they are plain links
suppress_warnings = ["myst.xref_missing"]


html_theme = "alabaster"
html_title = f"pyrolik {release}"
