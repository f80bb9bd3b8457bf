"""Every warning pyrolik issues, under one base class, and the severity of a result's messages.

``warnings.filterwarnings("error", category=pyrolik.PyrolikWarning)`` turns all of them into errors.
"""

from __future__ import annotations

__all__ = ["PyrolikWarning", "DiagnosticWarning", "RemarkWarning", "IdiomWarning",
           "FailedExamplesWarning", "BudgetWarning", "Message", "ACT", "REMARK", "remark",
           "severity", "prefixed"]

#: A message's severity: something to act on (the default, also of a plain ``str``) ...
ACT = "act"
#: ... or a remark at the level of Monte Carlo noise / a standing caveat of the settings.
REMARK = "remark"
SEVERITIES = (ACT, REMARK)


class PyrolikWarning(UserWarning):
    """Base class of every warning pyrolik issues."""


class DiagnosticWarning(PyrolikWarning):
    """A diagnostic says an estimate should not be trusted as it stands."""


class RemarkWarning(DiagnosticWarning):
    """A diagnostic remark at the level of Monte Carlo noise, or a standing caveat of the settings
    (a :class:`Message` of severity :data:`REMARK`): nothing to act on.
    ``warnings.filterwarnings("ignore", category=pyrolik.exceptions.RemarkWarning)`` hides them."""


class IdiomWarning(PyrolikWarning):
    """A Pyro construct that pyrolik evaluates differently from SVI's objective (``docs/idioms.md``)."""


class FailedExamplesWarning(PyrolikWarning, RuntimeWarning):
    """Some examples got a non-finite estimate (the model returned NaN or inf for them)."""


class BudgetWarning(PyrolikWarning):
    """The budget search stopped at its cap, or the real data disagree with the simulated ones."""


class Message(str):
    """A warning's text (a ``str``: compared, joined and printed as before) with its ``severity``,
    :data:`ACT` or :data:`REMARK`, decided by the code that writes the message."""

    severity: str

    def __new__(cls, text: str, severity: str = ACT) -> Message:
        if severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {severity!r}")
        self = super().__new__(cls, text)
        self.severity = severity
        return self

    def __reduce__(self):  # pickles (and copies) with its severity
        return (type(self), (str(self), self.severity))


def remark(text: str) -> Message:
    """``text`` as a :data:`REMARK`: at the level of Monte Carlo noise, or a standing caveat."""
    return Message(text, REMARK)


def severity(message: str) -> str:
    """The severity of a warning message: its own for a :class:`Message`, :data:`ACT` for a plain
    ``str`` (a message nobody classified is shown, never folded away)."""
    return getattr(message, "severity", ACT)


def prefixed(prefix: str, message: str) -> Message:
    """``prefix + message`` with the message's severity (e.g. BDMC's ``"forward: "``)."""
    return Message(prefix + str(message), severity(message))

