"""Token-length distributions of a synthetic workload: fixed, uniform, normal, lognormal, bounded.

Written in a test definition as a number (fixed) or an inline table:

    input_tokens = 512
    input_tokens = {dist = "uniform", min = 128, max = 1024}
    input_tokens = {dist = "normal", mean = 512, std = 128, min = 16, max = 2048}
    output_tokens = {dist = "lognormal", mean = 256, sigma = 0.6, max = 1024}

Draws are rounded to integers and clipped to [min, max] (min at least 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["DISTRIBUTIONS", "LengthDist", "parse_length"]

DISTRIBUTIONS = ("fixed", "uniform", "normal", "lognormal")
_KEYS = {"fixed": {"value"}, "uniform": {"min", "max"}, "normal": {"mean", "std", "min", "max"},
         "lognormal": {"mean", "sigma", "min", "max"}}
_MAX_TOKENS = 1 << 24


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A token length: `kind` in DISTRIBUTIONS; `mean` is the fixed value for `fixed`.

    lognormal: `mean` is the distribution's mean (not exp(mu)) and `sigma` the
    log-space standard deviation.
    """

    kind: str = "fixed"
    mean: float = 1.0
    std: float = 0.0
    sigma: float = 0.0
    min: int = 1
    max: int = _MAX_TOKENS

    def draw(self, rng: np.random.Generator, count: int) -> npt.NDArray[np.int64]:
        """`count` lengths, rounded and clipped to [min, max]."""
        if self.kind == "fixed":
            raw = np.full(count, self.mean)
        elif self.kind == "uniform":
            return rng.integers(self.min, self.max + 1, count, dtype=np.int64)
        elif self.kind == "normal":
            raw = rng.normal(self.mean, self.std, count)
        else:
            mu = math.log(self.mean) - self.sigma**2 / 2
            raw = rng.lognormal(mu, self.sigma, count)
        drawn: npt.NDArray[np.int64] = np.clip(np.rint(raw), self.min, self.max).astype(np.int64)
        return drawn

    def as_dict(self) -> dict[str, Any]:
        """The TOML form it was written in."""
        if self.kind == "fixed":
            return {"dist": "fixed", "value": int(self.mean)}
        out: dict[str, Any] = {"dist": self.kind}
        if self.kind == "normal":
            out |= {"mean": self.mean, "std": self.std}
        if self.kind == "lognormal":
            out |= {"mean": self.mean, "sigma": self.sigma}
        return out | {"min": self.min, "max": self.max}


def _number(key: str, name: str, value: Any, problems: list[str]) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        problems.append(f"{key}: {name} must be a number, got {value!r}")
        return None
    return float(value)


def parse_length(key: str, value: Any, problems: list[str]) -> LengthDist | None:
    """A LengthDist from a number or an inline table (None: not set); problems are appended,
    naming `key`."""
    if value is None or isinstance(value, LengthDist):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        value = {"dist": "fixed", "value": value}
    if not isinstance(value, dict):
        problems.append(f"{key}: expected a token count or a table like "
                        f'{{dist = "uniform", min = 1, max = 512}}, got {value!r}')
        return None
    kind = value.get("dist", "fixed")
    if kind not in DISTRIBUTIONS:
        problems.append(f"{key}: dist {kind!r} is not one of {', '.join(DISTRIBUTIONS)}")
        return None
    unknown = sorted(set(value) - _KEYS[kind] - {"dist"})
    if unknown:
        problems.append(f"{key}: {kind} takes {', '.join(sorted(_KEYS[kind]))}, not "
                        f"{', '.join(unknown)}")
        return None
    required = {"fixed": ("value",), "uniform": ("min", "max"), "normal": ("mean", "std"),
                "lognormal": ("mean", "sigma")}[kind]
    missing = [name for name in required if name not in value]
    if missing:
        problems.append(f"{key}: {kind} needs {', '.join(missing)}")
        return None
    numbers = {name: _number(key, name, v, problems) for name, v in value.items() if name != "dist"}
    if any(v is None for v in numbers.values()):
        return None
    n: dict[str, float] = {k: v for k, v in numbers.items() if v is not None}
    low, high = int(n.get("min", 1)), int(n.get("max", _MAX_TOKENS))
    mean = n.get("value", n.get("mean", (low + high) / 2))
    dist = LengthDist(kind, mean, n.get("std", 0.0), n.get("sigma", 0.0), low, high)
    if low < 1 or high < low or high > _MAX_TOKENS:
        problems.append(f"{key}: bounds must satisfy 1 <= min <= max <= {_MAX_TOKENS}, "
                        f"got min={low} max={high}")
    elif kind == "fixed" and not 1 <= mean <= _MAX_TOKENS:
        problems.append(f"{key}: a fixed length must be 1 to {_MAX_TOKENS}, got {mean:g}")
    elif kind in ("normal", "lognormal") and (mean <= 0 or dist.std < 0 or dist.sigma < 0):
        problems.append(f"{key}: mean must be above 0 and std/sigma not negative")
    else:
        return dist
    return None
