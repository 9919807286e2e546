"""The optional dependencies a SUT kind needs, checked before it is built.

`pip install loadgen` is the load generator alone; the serving harness and the LLM
engine (`builtin:`, `loadgen serve`) need torch and scikit-learn, the `sut` extra.
Asking for them without it fails at once with the command that installs them.
"""

from __future__ import annotations

import importlib.util

from loadgen.errors import SutSpecError

__all__ = ["SUT_EXTRA", "missing_modules", "require_sut_extra"]

SUT_EXTRA = ("torch", "sklearn")
"""The modules of the `sut` extra (torch, scikit-learn), as imported."""

_PIP_NAMES = {"sklearn": "scikit-learn"}


def missing_modules(modules: tuple[str, ...]) -> list[str]:
    """The pip names of those `modules` this interpreter cannot import."""
    return [_PIP_NAMES.get(m, m) for m in modules if importlib.util.find_spec(m) is None]


def require_sut_extra(what: str) -> None:
    """Raise SutSpecError naming the `sut` extra when torch or scikit-learn is missing."""
    missing = missing_modules(SUT_EXTRA)
    if missing:
        raise SutSpecError(
            f"{what} needs the serving harness, which needs {' and '.join(missing)} (not "
            "installed): pip install 'loadgen[sut]' (from a clone: pip install -e '.[sut]')")
