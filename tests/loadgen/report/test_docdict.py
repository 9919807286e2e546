"""A document record's JSON form: kind and schema_version lead, the other fields keep their
order, each through its converter; tuples become lists; a field may be left out while None."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen.report.docdict import document_dict


@dataclass(frozen=True, slots=True)
class _Doc:
    name: str
    tags: tuple[str, ...]
    parts: tuple[int, ...]
    note: str | None = None
    extra: dict[str, Any] | None = None
    kind: str = "demo"
    schema_version: int = 2


def test_kind_and_version_lead_then_fields_in_order_through_their_converters() -> None:
    doc = _Doc("a", ("x", "y"), (1, 2))
    out = document_dict(doc, {"parts": lambda parts: [p * 10 for p in parts]})
    assert list(out) == ["kind", "schema_version", "name", "tags", "parts", "note", "extra"]
    assert out == {"kind": "demo", "schema_version": 2, "name": "a", "tags": ["x", "y"],
                   "parts": [10, 20], "note": None, "extra": None}


def test_a_field_in_omit_none_is_left_out_only_while_none() -> None:
    assert "note" not in document_dict(_Doc("a", (), ()), {}, omit_none=("note",))
    assert document_dict(_Doc("a", (), (), note="n"), {}, omit_none=("note",))["note"] == "n"


@dataclass(frozen=True, slots=True)
class _Point:
    index: int
    dirs: tuple[str, ...]


def test_a_record_without_kind_starts_with_its_first_field() -> None:
    assert document_dict(_Point(3, ("d",)), {}) == {"index": 3, "dirs": ["d"]}
