"""The package's version, from the source itself: a run from a tree that is not installed
(PYTHONPATH) knows it as well as an installed one (pyproject.toml reads it from here)."""

from __future__ import annotations

__all__ = ["VERSION"]

VERSION = "0.1.0"
