"""The API reference a user can land on: every function and class that ``pyrolik`` or one of its
subpackages exports in ``__all__`` has a page of its own in the built site, and every exported module
and constant is documented on its package's page (read off the site's ``objects.inv``)."""

from __future__ import annotations

import inspect
import types
from pathlib import Path

import pytest

import pyrolik
from tests.test_docstrings import public_modules

PAGE_ROLES = {"py:function", "py:class", "py:exception"}


def inventory(site: Path) -> dict[str, tuple[str, str]]:
    """``{name: (role, uri)}`` of the site's Python objects."""
    from sphinx.util.inventory import InventoryFile

    with open(site / "objects.inv", "rb") as f:
        inv = InventoryFile.load(f, "", lambda base, uri: uri)
    data = inv.data if hasattr(inv, "data") else inv
    out = {}
    for role, entries in data.items():
        if role.startswith("py:"):
            for name, entry in entries.items():
                out[name] = (role, entry.uri if hasattr(entry, "uri") else entry[2])
    return out


def exported() -> dict[str, dict]:
    """``{kind: {id: (obj, {public names})}}`` for kinds "object", "module" and "data"."""
    out: dict[str, dict] = {"object": {}, "module": {}, "data": {}}
    for module in public_modules():
        prefix = module.__name__
        for name in module.__all__:
            if name.startswith("__"):
                continue
            obj = getattr(module, name)
            kind = ("module" if isinstance(obj, types.ModuleType) else
                    "object" if inspect.isclass(obj) or callable(obj) else "data")
            key = (id(obj), name) if kind == "data" else id(obj)
            out[kind].setdefault(key, (obj, set()))[1].add(f"{prefix}.{name}")
    return out


@pytest.fixture(scope="module")
def objects(docs_site):
    return inventory(docs_site)


def test_every_exported_function_and_class_has_a_page(objects):
    missing = []
    items = exported()["object"].values()
    for _obj, names in items:
        own = [n for n in names if objects.get(n, ("", ""))[0] in PAGE_ROLES
               and Path(objects[n][1].split("#")[0]).stem == n]
        if not own:
            missing.append(sorted(names)[0])
    assert len(items) >= 100  # the check has something to check
    assert not missing, f"{len(missing)} of {len(items)} without a page: {sorted(missing)}"


def test_every_exported_module_and_constant_is_documented(objects):
    found = exported()
    documented = {role: {n for n, (r, _) in objects.items() if r == role}
                  for role in ("py:module", "py:data")}
    undocumented = [sorted(names)[0] for obj, names in found["module"].values()
                    if not (names | {obj.__name__}) & documented["py:module"]]
    undocumented += [sorted(names)[0] for _, names in found["data"].values()
                     if not names & documented["py:data"]]
    assert len(found["module"]) >= 10
    assert not undocumented, undocumented


def test_the_top_level_estimators_have_their_own_pages(objects):
    for name in ("pyrolik.ais", "pyrolik.bdmc", "pyrolik.HMC", "pyrolik.concat",
                 "pyrolik.BudgetWarning", "pyrolik.diagnostics.to_elpd"):
        role, uri = objects[name]
        assert uri.split("#")[0].endswith(f"generated/{name}.html"), (name, uri)


def test_the_gallery_has_a_card_per_tutorial(docs_site):
    tutorials = sorted((Path(pyrolik.__file__).parents[1] / "tutorials").glob("[0-9][0-9]_*.ipynb"))
    html = (docs_site / "gallery.html").read_text()
    assert html.count("tutorial-card") >= len(tutorials) == 7
    assert html.count("_images/") >= 6  # thumbnails: the notebooks' first figures


def test_setup_cells_are_hidden_in_the_tutorials(docs_site):
    html = (docs_site / "tutorials" / "01_quickstart.html").read_text()
    assert "hide-input" in html and "smoke_test" in html  # collapsed, still one click away
