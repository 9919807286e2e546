"""The sample test definitions that ship inside the package (`loadgen/scenarios/*.toml`).

`--scenario NAME` reads one by its name (`server`, `offline`, `single_stream`,
`multi_stream`, ... or the MLPerf name, `SingleStream`); a pip user has them with no clone.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from loadgen.errors import SettingsError, suggest

__all__ = ["DEFAULT_SCENARIO", "Sample", "sample_file", "samples"]

DEFAULT_SCENARIO = "server"
"""What `run`, `sweep` and `find-peak` read when given neither FILE nor --scenario."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One shipped test definition: its name, file and the first line of its comment."""

    name: str
    path: Path
    summary: str


def _folder() -> Path:
    return Path(str(resources.files("loadgen") / "scenarios"))


def _summary(path: Path) -> str:
    """The file's leading comment up to its first full stop."""
    words: list[str] = []
    for line in path.read_text().splitlines():
        text = line.lstrip("# ").strip()
        if not line.startswith("#") or not text:
            break
        words.append(text)
        if text.endswith("."):
            break
    first = " ".join(words)
    return first.split(". ")[0].removesuffix(".")


def samples() -> list[Sample]:
    """Every shipped test definition, by name."""
    return [Sample(p.stem, p, _summary(p)) for p in sorted(_folder().glob("*.toml"))]


def _key(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "").removesuffix(".toml")


def sample_file(name: str) -> Path:
    """The shipped file a scenario name means; SettingsError with the names otherwise."""
    found = {_key(s.name): s.path for s in samples()}
    path = found.get(_key(name))
    if path is None:
        names = [s.name for s in samples()]
        problem = (f"--scenario {name!r}: no such sample scenario (one of {', '.join(names)})"
                   f"{suggest(name, names)}")
        raise SettingsError([problem])
    return path
