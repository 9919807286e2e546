"""Every test that may skip for a busy host is marked `serial`, so that `make test` runs it
after the parallel part, alone: a test calling a `tests/fairness.py` helper, or skipping with
a message that says the host or machine is busy (read from the source, not run)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
FAIRNESS_HELPERS = {"skip_if_busy_since", "skip_if_host_busy", "skip_if_host_unfair"}


def _is_serial_mark(node: ast.AST) -> bool:
    """`pytest.mark.serial` (a marker, not called)."""
    return isinstance(node, ast.Attribute) and node.attr == "serial" \
        and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"


def _module_is_serial(tree: ast.Module) -> bool:
    """Whether the module's `pytestmark` (one mark or a list) holds `pytest.mark.serial`."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            marks = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) \
                else [node.value]
            return any(_is_serial_mark(m) for m in marks)
    return False


def _text(node: ast.AST) -> str:
    """The literal parts of a string or f-string argument ('' for anything else)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(v) for v in node.values)
    return ""


def _skips_for_a_busy_host(test: ast.AST) -> bool:
    """Whether `test` calls a fairness helper or `pytest.skip` with a busy-host message."""
    for node in ast.walk(test):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) \
            else getattr(node.func, "id", "")
        if name in FAIRNESS_HELPERS:
            return True
        if name == "skip" and node.args and "busy" in _text(node.args[0]):
            return True
    return False


def unmarked_busy_host_tests(path: Path) -> list[str]:
    """The names of file `path`'s tests that may skip for a busy host, not marked serial."""
    tree = ast.parse(path.read_text(), str(path))
    if _module_is_serial(tree):
        return []
    return [node.name for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name.startswith("test_") and _skips_for_a_busy_host(node)
            and not any(_is_serial_mark(d) for d in node.decorator_list)]


def test_the_check_by_hand(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "import pytest\n"
        "def test_a():\n    skip_if_host_busy({}, 'x')\n"
        "@pytest.mark.serial\ndef test_b():\n    skip_if_host_unfair({})\n"
        "def test_c():\n    pytest.skip(f'the host is too busy: {1}')\n"
        "def test_d():\n    pytest.skip('needs a CUDA device')\n")
    assert unmarked_busy_host_tests(sample) == ["test_a", "test_c"]
    sample.write_text("import pytest\npytestmark = [pytest.mark.slow, pytest.mark.serial]\n"
                      "def test_a():\n    skip_if_busy_since(None, 'x')\n")
    assert unmarked_busy_host_tests(sample) == []


def test_tests_that_skip_for_a_busy_host_are_marked_serial() -> None:
    bad = [f"{path.relative_to(TESTS.parent)}::{name}" for path in sorted(TESTS.rglob("test_*.py"))
           for name in unmarked_busy_host_tests(path)]
    assert not bad, "mark these @pytest.mark.serial (see README, The two commands):\n" + \
        "\n".join(bad)
