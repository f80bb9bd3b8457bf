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

__all__ = ["PyrolikWarning", "DiagnosticWarning", "IdiomWarning", "FailedExamplesWarning",
           "BudgetWarning"]


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
