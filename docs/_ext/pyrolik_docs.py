"""The site's own Sphinx extension: the reference generated from ``__all__``, MathJax shipped with the
site, the tutorials' gallery, and links in place of the file names docstrings mention.

- ``config-inited`` (before Sphinx lists the sources, and autosummary reads them) writes ``api/<package>.rst``, one page per
  public package of pyrolik, from its ``__all__``: each function and class gets its own page
  (autosummary, templates in ``_templates/autosummary``) under the first package that exports it,
  in the order :data:`PACKAGES` lists them (``pyrolik.ais``, not ``pyrolik.infer.ais``); the other
  packages list it in a table that links there. Modules in ``__all__`` are documented on their
  package's page, with their own ``__all__``; constants as data on the page.
- MathJax 3 comes from the ``django-static-mathjax`` wheel (the ``docs`` extra): the TeX-to-HTML
  bundle, its fonts and the TeX extensions it loads on demand are copied into ``_static/mathjax``,
  so formulas render with no network.
- ``.. tutorial-gallery::`` is a grid of cards, one per stored notebook in ``tutorials/``: its
  title, the first sentence of its introduction, and its first figure as the thumbnail.
- A docstring's ``docs/NAME.md`` becomes a link to the guide ``NAME``; a guide's link to a file of
  the repository outside ``docs/`` that the site includes (``LINKED_FILES``) is resolved to its page.
"""

from __future__ import annotations

import base64
import importlib
import inspect
import json
import pkgutil
import re
import shutil
import types
import warnings
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
API = DOCS / "api"
GENERATED_PAGES = API / "packages"  # the package pages (not committed: .gitignore)
THUMBNAILS = DOCS / "_thumbnails"  # the gallery's thumbnails (not committed)

# Packages in the order that decides where an object exported twice is documented (its first), and
# the order of the reference's table of contents.
PACKAGES = ["pyrolik", "pyrolik.infer", "pyrolik.results", "pyrolik.diagnostics",
            "pyrolik.distortion", "pyrolik.curves", "pyrolik.io", "pyrolik.training",
            "pyrolik.model", "pyrolik.execution", "pyrolik.schedules", "pyrolik.annealing"]

# MathJax 3's files the site needs: the TeX-in, HTML-out bundle, the fonts it draws with, the TeX
# packages it loads when a formula uses them (\boldsymbol, ...), and the menu's components.
MATHJAX_FILES = ["tex-chtml.js", "input/tex/extensions", "output/chtml/fonts/woff-v2", "ui", "a11y",
                 "adaptors"]

# repository files outside docs/ that guides link to, and the page of the site that shows them
LINKED_FILES = {"benchmarks/RESULTS.md": "benchmarks"}


# ---------------------------------------------------------------------------------------- reference
def public_packages() -> list[str]:
    """``PACKAGES``, plus any subpackage of pyrolik with an ``__all__`` that the list forgot."""
    import pyrolik

    found = [f"pyrolik.{m.name}" for m in pkgutil.iter_modules(pyrolik.__path__)
             if m.ispkg and hasattr(importlib.import_module(f"pyrolik.{m.name}"), "__all__")]
    return PACKAGES + [p for p in found if p not in PACKAGES]


def kind_of(obj: Any) -> str | None:
    if isinstance(obj, type) and issubclass(obj, Warning):
        return "warning"
    if isinstance(obj, type):
        return "class"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj) or callable(obj) and hasattr(obj, "__wrapped__"):
        return "function"
    if isinstance(obj, types.ModuleType):
        return "module"
    return "data"


def public_names(module: types.ModuleType) -> list[tuple[str, Any]]:
    return [(name, getattr(module, name)) for name in getattr(module, "__all__", [])
            if not name.startswith("__")]


def canonical_names() -> dict[int, str]:
    """``id(obj) -> "package.name"``: where each public function and class gets its page."""
    owner: dict[int, str] = {}

    def visit(modname: str) -> None:
        module = importlib.import_module(modname)
        for name, obj in public_names(module):
            if kind_of(obj) in ("function", "class", "warning"):
                owner.setdefault(id(obj), f"{modname}.{name}")
        for name, obj in public_names(module):
            if kind_of(obj) == "module" and module_name(modname, name) not in PACKAGES:
                visit(module_name(modname, name))

    for package in public_packages():
        visit(package)
    return owner


def module_name(package: str, name: str) -> str:
    """The full name of the module exported as ``package.name`` (a module that two packages export
    is documented once, under its own name)."""
    return getattr(importlib.import_module(package), name).__name__


SECTIONS = [("function", "Functions"), ("class", "Classes"), ("warning", "Warnings")]


def package_page(package: str, owner: dict[int, str]) -> str:
    module = importlib.import_module(package)
    title = f"``{package}``"
    out = [title, "=" * len(title), "", f".. automodule:: {package}", "   :no-members:", "",
           f".. currentmodule:: {package}", ""]
    out += members(package, module, owner, level="-")
    modules = [(n, o) for n, o in public_names(module) if kind_of(o) == "module"]
    own = [(n, o) for n, o in modules if module_name(package, n) not in PACKAGES]
    elsewhere = [(n, o) for n, o in modules if module_name(package, n) in PACKAGES]
    if elsewhere:
        out += ["Subpackages", "-----------", "", ".. list-table::", "   :widths: 30 70", ""]
        for name, obj in elsewhere:
            first = (inspect.getdoc(obj) or "").split("\n\n")[0].replace("\n", " ")
            out += [f"   * - :doc:`{module_name(package, name)}`", f"     - {first}"]
        out.append("")
    for name, _ in own:
        full = module_name(package, name)
        title = f"``{full}``"
        out += [title, "-" * len(title), "", f".. automodule:: {full}", "   :no-members:", "",
                f".. currentmodule:: {full}", ""]
        out += members(full, importlib.import_module(full), owner, level="~")
    return "\n".join(out) + "\n"


def members(modname: str, module: types.ModuleType, owner: dict[int, str], level: str) -> list[str]:
    out: list[str] = []
    names = public_names(module)
    for kind, heading in SECTIONS:
        mine = [n for n, o in names if kind_of(o) == kind and owner.get(id(o)) == f"{modname}.{n}"]
        other = [owner[id(o)] for n, o in names
                 if kind_of(o) == kind and owner.get(id(o)) != f"{modname}.{n}"]
        if not mine and not other:
            continue
        out += [heading, level * len(heading), ""]
        if mine:
            out += [".. autosummary::", "   :toctree: ../generated/", "   :nosignatures:", ""]
            out += [f"   {n}" for n in mine] + [""]
        if other:
            out += ["Also exported here:", "", ".. autosummary::", "   :nosignatures:", ""]
            out += [f"   ~{full}" for full in other] + [""]
    data = [n for n, o in names if kind_of(o) == "data"]
    if data:
        out += ["Constants", level * len("Constants"), ""]
        for name in data:
            out += [f".. autodata:: {modname}.{name}", ""]
    return out


def write_reference(app, config=None) -> None:
    """Write ``api/packages/<package>.rst`` for every public package (before autosummary runs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        owner = canonical_names()
        GENERATED_PAGES.mkdir(parents=True, exist_ok=True)
        wanted = {}
        for package in public_packages():
            wanted[f"{package}.rst"] = package_page(package, owner)
    for stale in GENERATED_PAGES.glob("*.rst"):
        if stale.name not in wanted:
            stale.unlink()
    for name, text in wanted.items():
        path = GENERATED_PAGES / name
        if not path.exists() or path.read_text() != text:  # unchanged pages are not rebuilt
            path.write_text(text)


class PackageToc(SphinxDirective):
    """``.. package-toc::``: the table of contents of the generated package pages, in order."""

    def run(self) -> list[nodes.Node]:
        lines = [".. toctree::", "   :maxdepth: 1", ""]
        lines += [f"   packages/{p}" for p in public_packages()]
        node = nodes.container()
        self.state.nested_parse(StringList(lines), self.content_offset, node)
        return node.children


# ------------------------------------------------------------------------------------------ MathJax
def mathjax_source() -> Path:
    """MathJax 3's ``es5`` folder inside the installed ``django-static-mathjax`` package."""
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("MathJax is not installed: pip install -e '.[docs]' "
                           "(django-static-mathjax ships it)")
    es5 = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax" / "es5"
    if not (es5 / "tex-chtml.js").is_file():
        raise RuntimeError(f"{es5} holds no tex-chtml.js: reinstall django-static-mathjax")
    return es5


def copy_mathjax(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    source, target = mathjax_source(), Path(app.outdir) / "_static" / "mathjax"
    for entry in MATHJAX_FILES:
        src, dst = source / entry, target / entry
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


# ------------------------------------------------------------------------------------------ gallery
def notebook_card(path: Path) -> dict[str, str]:
    """A stored notebook's title, first sentence and first PNG figure (written to _thumbnails)."""
    nb = json.loads(path.read_text())
    title, blurb, image = path.stem, "", None
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and not blurb:
            text = re.sub(r"^#.*\n?", "", source, count=1, flags=re.M).strip() if source.startswith("# ") else source
            if source.startswith("# "):
                title = source.splitlines()[0][2:].strip()
            paragraph = text.split("\n\n")[0].replace("\n", " ").strip()
            blurb = re.split(r"(?<=[a-z0-9)]{3}[.!?])\s+(?=[A-Z])", paragraph)[0]
        if cell["cell_type"] == "code" and image is None:
            for output in cell.get("outputs", []):
                png = output.get("data", {}).get("image/png")
                if png:
                    image = "".join(png) if isinstance(png, list) else png
                    break
    thumb = ""
    if image:
        THUMBNAILS.mkdir(exist_ok=True)
        data = base64.b64decode(image)
        target = THUMBNAILS / f"{path.stem}.png"
        if not target.exists() or target.read_bytes() != data:
            target.write_bytes(data)
        thumb = f"/_thumbnails/{path.stem}.png"
    return {"doc": f"/tutorials/{path.stem}", "title": title, "blurb": blurb, "image": thumb}


class TutorialGallery(SphinxDirective):
    """``{tutorial-gallery}`` (in a MyST page): one card per tutorial, its first figure on top."""

    def run(self) -> list[nodes.Node]:
        lines = ["::::{grid} 1 2 3 3", ":gutter: 3", ""]
        for path in sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.ipynb")):
            card = notebook_card(path)
            self.env.note_dependency(str(path))
            lines += [f":::{{grid-item-card}} {card['title']}", f":link: {card['doc']}",
                      ":link-type: doc", ":class-card: tutorial-card"]
            if card["image"]:
                lines.append(f":img-top: {card['image']}")
            lines += ["", card["blurb"], ":::", ""]
        lines.append("::::")
        node = nodes.container()
        self.state.nested_parse(StringList(lines), self.content_offset, node)
        return node.children


# -------------------------------------------------------------------------------------------- links
DOCS_FILE = re.compile(r"(`{0,2})docs/(\w+)\.md(`{0,2})")


def link_guides(app, what, name, obj, options, lines: list[str]) -> None:
    """``docs/kernel.md`` in a docstring -> a link to the guide (when the guide exists)."""
    def replace(match: re.Match) -> str:
        guide = match.group(2)
        if not (DOCS / f"{guide}.md").is_file():
            return match.group(0)
        return f":doc:`docs/{guide}.md </{guide}>`"

    for i, line in enumerate(lines):
        if "docs/" in line and not line.lstrip().startswith((">>>", "...")):
            lines[i] = DOCS_FILE.sub(replace, line)


def link_repository_files(app, doctree) -> None:
    """A guide's link to ``../benchmarks/RESULTS.md`` (right on GitHub) -> the page that shows it."""
    from sphinx import addnodes

    for node in doctree.findall(addnodes.pending_xref):
        if node.get("reftype") != "myst" or node.get("refdomain") != "doc":
            continue
        for file, docname in LINKED_FILES.items():
            if node["reftarget"].endswith(file.removesuffix(".md")):
                node["reftarget"] = docname


def plain_citations_in_tables(app, doctree) -> None:
    """A summary line citing ``[1]_`` shows "[1]" in an autosummary table, not numpydoc's mangled
    label, which resolves to nothing on that page."""
    from sphinx import addnodes
    from sphinx.ext.autosummary import autosummary_table

    for table in doctree.findall(autosummary_table):
        for ref in list(table.findall(addnodes.pending_xref)):
            if ref.get("reftype") == "citation" or ref.get("refdomain") == "citation":
                label = ref.get("reftarget", "").rsplit("-", 1)[-1]
                ref.parent.replace(ref, nodes.Text(f"[{label}]"))


def setup(app) -> dict[str, Any]:
    app.connect("config-inited", write_reference)  # before Sphinx lists the sources
    app.connect("build-finished", copy_mathjax)
    app.connect("autodoc-process-docstring", link_guides, priority=400)  # before numpydoc
    app.connect("doctree-read", link_repository_files)
    app.connect("doctree-read", plain_citations_in_tables)
    app.add_directive("tutorial-gallery", TutorialGallery)
    app.add_directive("package-toc", PackageToc)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
