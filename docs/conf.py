"""Sphinx configuration: the guides (MyST), the tutorials (myst-nb: the executed ``tutorials/*.ipynb``
with their stored outputs, never re-run), and the reference, one page per public function and class,
generated from the packages' ``__all__`` (``_ext/pyrolik_docs.py``).

Build: ``pip install -e ".[docs]" && sphinx-build -W --keep-going -b html docs docs/_build/html``
(``.ci/run`` does this with warnings as errors). The site works offline: MathJax is copied into it
from the ``django-static-mathjax`` wheel, and the links to torch, Pyro, ArviZ, xarray, pandas and
numpy come from their published inventories when the build can reach them, else from the small
inventories in ``_intersphinx/`` (``python docs/_intersphinx/build.py`` writes them).
"""

from __future__ import annotations

import os
import sys
import warnings

sys.path.insert(0, os.path.abspath(".."))
sys.path.insert(0, os.path.abspath("_ext"))
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
    "sphinx.ext.intersphinx",
    "numpydoc",
    "myst_nb",  # MyST markdown for the guides, and the stored notebooks
    "sphinx_copybutton",
    "sphinx_design",  # the tutorials' gallery cards
    "pyrolik_docs",  # _ext/: the reference from __all__, offline MathJax, the gallery
]
root_doc = "index"
templates_path = ["_templates"]
# docs/tutorials links to ../tutorials: the stored .ipynb are rendered, their .md sources are not
exclude_patterns = ["_build", "tutorials/*.md", "tutorials/.ipynb_checkpoints", "_intersphinx",
                    "_ext", "_templates"]
nb_execution_mode = "off"
nb_merge_streams = True

# ---- the reference
autosummary_generate = True
autosummary_ignore_module_all = False
autodoc_member_order = "bysource"
autodoc_typehints = "none"          # numpydoc's Parameters sections carry the types
autodoc_default_options = {"exclude-members": "__init__, __new__"}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = True
numpydoc_xref_aliases = {
    "callable": ":term:`python:callable`",
    "Tensor": "torch.Tensor",
    "Generator": "torch.Generator",
    "Module": "torch.nn.Module",
    "DataFrame": "pandas.DataFrame",
    "Series": "pandas.Series",
    "DataTree": "xarray.DataTree",
    "Dataset": "xarray.Dataset",
    "DataArray": "xarray.DataArray",
    "InferenceData": "arviz.InferenceData",
    "ndarray": "numpy.ndarray",
    "AISResult": "pyrolik.results.AISResult",
    "BDMCResult": "pyrolik.results.BDMCResult",
    "EstimateResult": "pyrolik.results.EstimateResult",
    "HMC": "pyrolik.HMC",
}
numpydoc_xref_ignore = {"of", "or", "and", "optional", "default", "shape", "type", "the", "a", "an",
                        "in", "to", "same", "as", "with", "per", "one", "each", "None", "True",
                        "False", "int", "float", "str", "bool", "dict", "list", "tuple", "callable",
                        "object", "sequence", "Sequence", "Callable", "iterable", "path", "like",
                        "array", "tensor", "arrays", "tensors", "number", "function", "mapping"}

# links to the libraries pyrolik's signatures name: their published inventory where the build
# reaches it, else the small one shipped in _intersphinx/ (no warning either way, no network needed)
_INVENTORIES = {
    "python": "https://docs.python.org/3/",
    "torch": "https://docs.pytorch.org/docs/stable/",
    "pyro": "https://docs.pyro.ai/en/stable/",
    "arviz": "https://python.arviz.org/en/stable/",
    "xarray": "https://docs.xarray.dev/en/stable/",
    "pandas": "https://pandas.pydata.org/docs/",
    "numpy": "https://numpy.org/doc/stable/",
}
intersphinx_mapping = {name: (url, (None, f"_intersphinx/{name}.inv"))
                       for name, url in _INVENTORIES.items()}
if os.environ.get("PYROLIK_DOCS_OFFLINE"):  # a reproducible build: the shipped inventories only
    intersphinx_mapping = {name: (url, f"_intersphinx/{name}.inv")
                           for name, url in _INVENTORIES.items()}
intersphinx_timeout = 5

# MathJax 3 from the django-static-mathjax wheel, copied into _static/mathjax (_ext/pyrolik_docs.py)
mathjax_path = "mathjax/tex-chtml.js"

# ---- the guides
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

# ---- the site
html_theme = "pydata_sphinx_theme"
html_title = f"pyrolik {release}"
html_static_path = ["_static"]
html_css_files = ["pyrolik.css"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 6,
    # the tutorials' figures get the page's whole width; elsewhere the page's contents on the right
    "secondary_sidebar_items": {"*": ["page-toc"], "api/**": ["page-toc"], "tutorials/*": []},
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_sidebars = {"index": [], "getting_started": []}
html_show_sourcelink = False
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
copybutton_exclude = ".linenos, .gp, .go"
