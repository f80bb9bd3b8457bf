"""Every public function documents its parameters (a numpydoc Parameters section naming each one),
and every estimator shows a short example (an Examples section, run by
``tests/integration/test_docstring_examples.py``).

"Public" is what ``pyrolik`` and its subpackages export in ``__all__``, and the modules those export
(the reference's pages: ``docs/_ext/pyrolik_docs.py``).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types

from numpydoc.docscrape import FunctionDoc

import pyrolik

ESTIMATORS = ["ais", "reverse_ais", "simulate", "bdmc", "evidence", "evidence_bdmc", "budget", "iwae",
              "likelihood_weighting", "kde", "csl", "compare", "sigma_curve", "rate_distortion",
              "distortion_bdmc", "concat", "save", "load"]

def public_modules() -> list[types.ModuleType]:
    """pyrolik, its subpackages with an ``__all__``, and the modules those export, recursively."""
    found = [pyrolik] + [importlib.import_module(f"pyrolik.{m.name}")
                         for m in pkgutil.iter_modules(pyrolik.__path__) if m.ispkg]
    found = [m for m in found if hasattr(m, "__all__")]
    i = 0
    while i < len(found):
        for name in found[i].__all__:
            obj = getattr(found[i], name)
            if isinstance(obj, types.ModuleType) and obj.__name__.startswith("pyrolik") \
                    and all(obj is not m for m in found):
                found.append(obj)
        i += 1
    return found


def public_functions() -> dict[str, object]:
    """``{first public name: function}``, each function once."""
    out: dict[str, object] = {}
    seen: set[int] = set()
    for module in public_modules():
        prefix = module.__name__
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj) and id(obj) not in seen:
                seen.add(id(obj))
                out[f"{prefix}.{name}"] = obj
    return out


def undocumented_parameters(fn) -> list[str]:
    """The signature's parameters that the docstring's Parameters section does not name."""
    names = [p.name for p in inspect.signature(fn).parameters.values()
             if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in ("self", "cls")]
    documented: set[str] = set()
    for param in FunctionDoc(fn)["Parameters"]:
        documented |= {n.strip().lstrip("*") for n in param.name.split(",")}
    return [n for n in names if n not in documented]


def test_every_public_function_documents_its_parameters():
    functions = public_functions()
    assert len(functions) >= 90
    gaps = {name: missing for name, fn in functions.items()
            if (missing := undocumented_parameters(fn))}
    assert not gaps, "\n".join(f"{n}: {', '.join(m)}" for n, m in sorted(gaps.items()))


def test_every_estimator_has_an_example():
    missing = {name for name in ESTIMATORS
               if "Examples\n--------" not in inspect.getdoc(getattr(pyrolik, name))}
    assert not missing, f"without an example: {sorted(missing)}"
