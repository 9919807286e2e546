"""The layout holds: loadgen's folders follow the data path, imports point one way, no cycles.

Every module of `loadgen`, `sut` and `oipwire` is parsed with `ast`, and every import in it is
read: module level, inside functions, under `if TYPE_CHECKING`, in `try` blocks, relative ones
(resolved), and `importlib.import_module("...")` with a constant name. Rules:

- loadgen: a module imports only from its own stage or an earlier one (`STAGES`); the package
  face (`loadgen/__init__.py`, `loadgen/__main__.py`) may import anything and nothing imports it.
  `oipwire` is free to every stage; `sut` only to the modules in `SUT_IMPORTERS`.
- sut: may import `oipwire`, never `loadgen`.
- oipwire: only the standard library, numpy and itself (`oipwire.proto` also protobuf and grpc).
- no import cycle among the modules of the three packages (function-local imports included).
- each module imports alone in a fresh interpreter.
- README's Architecture section names every module (the generated gRPC stubs aside).
- tests mirror the stage folders: `tests/loadgen/<stage>/test_<module>[_<more>].py` names a
  module of `loadgen/<stage>/`; a file directly in `tests/loadgen/` names a module of the package
  face or a top-level stage (`test_face.py` is the face's); the feature suites (`FEATURE_SUITES`)
  cross stages and keep their own names.
- `NEVER`: pairs of folders where the first never reaches the second, directly or through
  other modules (records live below their readers; transport stays below protocol).

An import `from P import N` counts as an import of the module `P.N` when that is a module, else
of `P`; when `P` is a package, it counts as an import of the package (its `__init__`) as well, so
a package whose `__init__` imports a module that reads a sibling off the package is a cycle
(`loadgen.cli` -> `cli.main` -> `cli.analysis` -> `loadgen.cli` was one). Other imports of a
submodule run its parent packages too, but do not count as imports of them.
"""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("loadgen", "sut", "oipwire")

# loadgen's stages, in data-path order: a module may import its own stage or an earlier one.
STAGES: tuple[tuple[str, str], ...] = (
    ("loadgen.errors", "the one error hierarchy, importable by all"),
    ("loadgen.plan", "settings, arrivals, trace files, QSL, schedule, plan: what to send and when"),
    ("loadgen.adapters", "the SUT seam and the adapters: how queries reach a SUT"),
    ("loadgen.record", "histograms, windows, query log, collector, tally: what came back"),
    ("loadgen.engine", "runner, run session, load processes: walks the plan, files completions"),
    ("loadgen.judge", "statistics, early stopping, verdict"),
    ("loadgen.report", "result.json, summary, headline, tables, charts, html"),
    ("loadgen.live", "Prometheus exporter, progress lines: watches a run"),
    ("loadgen.api", "run a test, end to end"),
    ("loadgen.campaigns", "sweep, find-peak, compare, calibrate: many runs"),
    ("loadgen.mlperf", "the mlperf_loadgen drop-in, its conf files and log files"),
    ("loadgen.cli", "the command line"),
)
FACE = ("loadgen", "loadgen.__main__")  # the package face: may import anything, imported by none
SUT_IMPORTERS = ("loadgen.adapters.inprocess", "loadgen.adapters.llm",
                 "loadgen.cli.serve")  # the in-process adapters, serve
# (from, to): no module under `from` reaches one under `to`, even through others.
NEVER: tuple[tuple[str, str], ...] = (
    ("loadgen.judge", "loadgen.engine"),  # the verdict reads records, never the machinery
    ("loadgen.live", "loadgen.engine"),  # live views read records (`record.progress`)
    ("loadgen.campaigns", "loadgen.live"),  # campaigns plan runs; watching one is live's job
    ("loadgen.adapters.wire", "loadgen.adapters"),  # transport never reaches up into protocol
)
# test folders of tests/loadgen named for a feature, not a stage: exempt from the mirror rule
FEATURE_SUITES = ("distributed", "energy", "llm", "llm_wire", "mlperf", "ux")
OIPWIRE_THIRD_PARTY = ("numpy",)
OIPWIRE_PROTO_THIRD_PARTY = ("numpy", "google.protobuf", "grpc")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    path: Path
    line: int
    target: str  # the module imported, absolute


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


SOURCES = _sources()


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _resolve(module: str, path: Path, level: int, name: str | None) -> str:
    """The absolute name of `from <level dots><name> import ...` written in `module`."""
    if level == 0:
        return name or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _is_package(name: str) -> bool:
    return name in SOURCES and SOURCES[name].name == "__init__.py"


def _imports(module: str, path: Path) -> Iterator[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, path, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, path, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield Import(module, path, node.lineno, sub if sub in SOURCES else base)
                if sub in SOURCES and _is_package(base) and base != module:
                    yield Import(module, path, node.lineno, base)  # N is read off P's __init__
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
                   or isinstance(node.func, ast.Name) and node.func.id == "import_module")):
            yield Import(module, path, node.lineno, node.args[0].value)


ALL_IMPORTS = [imp for module, path in SOURCES.items() for imp in _imports(module, path)]


def _stage(module: str) -> int | None:
    """The stage index of a loadgen module; len(STAGES) for the face; None if unplaced."""
    if module in FACE:
        return len(STAGES)
    for index, (prefix, _) in enumerate(STAGES):
        if _within(module, prefix):
            return index
    return None


def _where(imp: Import) -> str:
    return f"{imp.path.relative_to(ROOT)}:{imp.line} -> {imp.target}"


def _third_party_ok(target: str, allowed: tuple[str, ...]) -> bool:
    top = target.split(".")[0]
    return top in sys.stdlib_module_names or any(_within(target, a) for a in allowed)


def test_the_stage_table_is_ordered_and_covers_every_loadgen_module():
    prefixes = [prefix for prefix, _ in STAGES]
    assert len(set(prefixes)) == len(prefixes)
    unplaced = sorted(m for m in SOURCES if _within(m, "loadgen") and _stage(m) is None)
    assert not unplaced, f"loadgen modules in no stage of STAGES: {unplaced}"
    empty = [p for p in prefixes if not any(_within(m, p) for m in SOURCES)]
    assert not empty, f"stages with no module: {empty}"


def test_loadgen_imports_only_its_own_and_earlier_stages():
    bad = []
    for imp in ALL_IMPORTS:
        if not _within(imp.module, "loadgen") or imp.module in FACE:
            continue
        here = _stage(imp.module)
        if here is None:
            continue  # unplaced: the stage-table test names it
        if _within(imp.target, "loadgen"):
            there = _stage(imp.target)
            if there is None or there > here:
                where = "the face" if there == len(STAGES) else (
                    STAGES[there][0] if there is not None else "no stage")
                bad.append(f"{_where(imp)} (stage {here} {STAGES[here][0]} imports {where})")
        elif _within(imp.target, "sut") and imp.module not in SUT_IMPORTERS:
            bad.append(f"{_where(imp)} (only {', '.join(SUT_IMPORTERS)} may import sut)")
    assert not bad, "imports against the data path:\n" + "\n".join(bad)


def test_sut_never_imports_loadgen():
    bad = [_where(imp) for imp in ALL_IMPORTS
           if _within(imp.module, "sut") and _within(imp.target, "loadgen")]
    assert not bad, "sut imports loadgen:\n" + "\n".join(bad)


def test_oipwire_imports_only_numpy_the_standard_library_and_itself():
    bad = []
    for imp in ALL_IMPORTS:
        if not _within(imp.module, "oipwire") or _within(imp.target, "oipwire"):
            continue
        allowed = (OIPWIRE_PROTO_THIRD_PARTY if _within(imp.module, "oipwire.proto")
                   else OIPWIRE_THIRD_PARTY)
        if not _third_party_ok(imp.target, allowed):
            bad.append(_where(imp))
    assert not bad, "oipwire imports beyond numpy and the standard library:\n" + "\n".join(bad)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:  # recursion depth is bounded by the module count (~100)
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1 or node in edges[node]:
                components.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return [_shortest_cycle(component[0], set(component), edges) for component in components]


def _shortest_cycle(start: str, members: set[str], edges: dict[str, set[str]]) -> list[str]:
    """Breadth first from `start` back to it, within its component."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(edges[node] & members):
                if nxt == start:
                    return paths[node] + [start]
                if nxt not in paths:
                    paths[nxt] = paths[node] + [nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"{start} is in a component but on no cycle")


def test_cycle_finder_by_hand():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert _cycles(edges) == [["a", "b", "c", "a"], ["e", "e"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_from_a_package_import_counts_the_package_init():
    targets = {imp.target for imp in _imports("loadgen.cli.analysis", SOURCES["loadgen.cli.analysis"])}
    assert {"loadgen.cli.helptext", "loadgen.cli"} <= targets  # `from loadgen.cli import helptext`
    assert "loadgen.cli.exits" in targets and "loadgen" not in targets


def test_no_import_cycles():
    edges: dict[str, set[str]] = {module: set() for module in SOURCES}
    lines: dict[tuple[str, str], str] = {}
    for imp in ALL_IMPORTS:
        if imp.target in SOURCES and imp.target != imp.module:
            edges[imp.module].add(imp.target)
            lines.setdefault((imp.module, imp.target), f"{imp.path.relative_to(ROOT)}:{imp.line}")
    cycles = _cycles(edges)
    described = [" -> ".join(c) + "\n    (" + ", ".join(
        lines[(a, b)] for a, b in itertools.pairwise(c)) + ")" for c in cycles]
    assert not cycles, "import cycles:\n" + "\n".join(described)


def _import_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {module: set() for module in SOURCES}
    for imp in ALL_IMPORTS:
        if imp.target in SOURCES and imp.target != imp.module:
            edges[imp.module].add(imp.target)
    return edges


def _reached(start: str, edges: dict[str, set[str]]) -> dict[str, list[str]]:
    """Every module `start` reaches, with one shortest path to it."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(edges[node]):
                if nxt not in paths:
                    paths[nxt] = paths[node] + [nxt]
                    following.append(nxt)
        frontier = following
    del paths[start]
    return paths


def test_reach_by_hand():
    edges = {"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}
    assert _reached("a", edges) == {"b": ["a", "b"], "c": ["a", "b", "c"]}
    assert _reached("c", edges) == {}


def test_never_table_holds():
    edges = _import_edges()
    for source, target in NEVER:
        assert any(_within(m, source) for m in SOURCES), f"NEVER names no module: {source}"
        assert any(_within(m, target) for m in SOURCES), f"NEVER names no module: {target}"
    bad = []
    for source, target in NEVER:
        for module in sorted(m for m in SOURCES if _within(m, source)):
            for reached, path in _reached(module, edges).items():
                if _within(reached, target) and not _within(reached, source):
                    bad.append(f"{source} reaches {target}: {' -> '.join(path)}")
                    break
    assert not bad, "imports the NEVER table forbids:\n" + "\n".join(bad)


def _named_module(test: Path) -> str | None:
    """The loadgen module a test file under tests/loadgen/ names, or None."""
    folder = test.parent.relative_to(ROOT / "tests" / "loadgen").parts
    package = ".".join(("loadgen", *folder))
    stem = test.stem.removeprefix("test_")
    names = {m.rsplit(".", 1)[-1]: m for m in SOURCES if m.rpartition(".")[0] == package}
    if not folder:
        names["face"] = "loadgen"
    fits = [name for name in names if stem == name or stem.startswith(name + "_")]
    return names[max(fits, key=len)] if fits else None


def test_mirror_rule_by_hand():
    tests = ROOT / "tests" / "loadgen"
    assert _named_module(tests / "engine" / "workers" / "test_processes.py") == (
        "loadgen.engine.workers.processes")
    assert _named_module(tests / "adapters" / "test_http_functional.py") == "loadgen.adapters.http"
    assert _named_module(tests / "test_face.py") == "loadgen"
    assert _named_module(tests / "record" / "test_record.py") is None
    assert _named_module(tests / "test_metrics.py") is None


def test_tests_mirror_the_stage_folders():
    tests = ROOT / "tests" / "loadgen"
    missing = [suite for suite in FEATURE_SUITES if not (tests / suite).is_dir()]
    assert not missing, f"FEATURE_SUITES names no folder: {missing}"
    bad = []
    for test in sorted(tests.rglob("test_*.py")):
        folder = test.parent.relative_to(tests).parts
        if folder and folder[0] in FEATURE_SUITES:
            continue
        if _named_module(test) is None:
            bad.append(f"{test.relative_to(ROOT)}: names no module of "
                       f"loadgen/{'/'.join(folder)}")
    assert not bad, "test files that mirror no module:\n" + "\n".join(bad)


def test_the_readme_architecture_names_every_module():
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Architecture")
    end = readme.find("\n## ", start)
    section = readme[start:end if end > 0 else len(readme)]
    unnamed = [name for name, path in SOURCES.items()
               if path.stem not in ("__init__", "__main__") and ".proto." not in name
               and path.stem not in section]
    assert not unnamed, f"README's Architecture section does not name: {unnamed}"


_IMPORT_EACH = """
import importlib, sys, traceback
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m.split(".")[0] in {packages!r}]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except BaseException as exc:
        if not failed:  # the first in full; the rest one line each
            print(traceback.format_exc(limit=-4))
        failed.append(f"{{name}}: {{type(exc).__name__}}: {{exc}}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


@pytest.mark.functional
def test_each_module_imports_alone_in_a_fresh_interpreter():
    """One interpreter per package (run side by side), each module imported from a clean slate.

    Clearing `sys.modules` of the three packages before each import makes every module load its
    own dependencies from scratch, as in a fresh interpreter; third-party modules stay loaded,
    which keeps the test to a few seconds and does not hide our cycles.
    """
    script = _IMPORT_EACH.format(packages=set(PACKAGES))
    runs = {}
    for package in PACKAGES:
        names = sorted(m for m in SOURCES if _within(m, package) and m != "loadgen.__main__")
        runs[package] = subprocess.Popen(
            [sys.executable, "-W", "error", "-c", script, *names], cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    failures = []
    try:
        for package, proc in runs.items():
            out, _ = proc.communicate(timeout=600)  # a failsafe: a busy host took over 120 s
            if proc.returncode:
                failures.append(f"{package}:\n{out}")
    finally:
        for proc in runs.values():  # stopped by pid if the failsafe fired
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert not failures, "modules that do not import alone:\n" + "\n".join(failures)
