"""The version of pyrolik (one place; the package and the export read it)."""

__version__ = "0.1.0"
