"""Every warning pyrolik issues, under one base class.

``warnings.filterwarnings("error", category=pyrolik.PyrolikWarning)`` turns all of them into errors,
``"ignore"`` silences them; the subclasses say what kind of problem it is:

- :class:`DiagnosticWarning`: a diagnostic of a finished estimate (acceptance, k-hat, ESS, an
  inverted BDMC gap) says it should not be trusted as it stands;
- :class:`IdiomWarning`: a Pyro construct that pyrolik evaluates differently from SVI's objective
  (``docs/idioms.md``);
- :class:`FailedExamplesWarning`: some examples got a non-finite estimate (also a
  :class:`RuntimeWarning`, as before);
- :class:`BudgetWarning`: ``tolerance=``'s search stopped at its cap, or the real data disagree
  with the simulated ones it chose the budget on.

Warnings with no narrower kind (a resumed checkpoint written by other library versions, a default
chosen for a command-line option, latents that do not look like exact posterior samples) are issued
as :class:`PyrolikWarning` itself.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

__all__ = ["PyrolikWarning", "DiagnosticWarning", "IdiomWarning", "FailedExamplesWarning",
           "BudgetWarning", "moved"]


class PyrolikWarning(UserWarning):
    """Base class of every warning pyrolik issues."""


class DiagnosticWarning(PyrolikWarning):
    """A diagnostic says an estimate should not be trusted as it stands."""


class IdiomWarning(PyrolikWarning):
    """A Pyro construct that pyrolik evaluates differently from SVI's objective (``docs/idioms.md``)."""


class FailedExamplesWarning(PyrolikWarning, RuntimeWarning):
    """Some examples got a non-finite estimate (the model returned NaN or inf for them)."""


class BudgetWarning(PyrolikWarning):
    """The budget search stopped at its cap, or the real data disagree with the simulated ones."""


def moved(module: str, name: str, table: dict[str, str]) -> Any:
    """A name ``module`` held before it moved, for a module's ``__getattr__``: ``table`` maps the old
    name to its new dotted path (a module, or ``module.attribute``). Warns with the new spelling
    (``FutureWarning``, one release) and returns the object; unknown names are an AttributeError."""
    if name not in table:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    new = table[name]
    warnings.warn(f"{module}.{name} is now {new}; the old spelling will be removed in the next "
                  "release", FutureWarning, stacklevel=3)
    try:
        return importlib.import_module(new)
    except ModuleNotFoundError:
        parent, attribute = new.rsplit(".", 1)
        return getattr(importlib.import_module(parent), attribute)
