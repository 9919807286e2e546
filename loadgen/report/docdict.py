"""A document record's JSON form, written one way for every document (peak.json, sweep.json
and their points): `kind` and `schema_version` first where the record has them, then every
other field in declaration order, each through its converter (a tuple, by default, as a list).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["Converter", "document_dict"]

Converter = Callable[[Any], Any]

_LEADING = ("kind", "schema_version")


def document_dict(record: DataclassInstance, converters: Mapping[str, Converter],
                  omit_none: Collection[str] = ()) -> dict[str, Any]:
    """`record` as a JSON object: the leading fields, then the rest in order, a field named in
    `converters` through its converter, a tuple as a list, anything else as it is; a field in
    `omit_none` is left out while it is None."""
    fields = dataclasses.fields(record)
    names = [n for n in _LEADING if any(f.name == n for f in fields)]
    names += [f.name for f in fields if f.name not in _LEADING]
    out: dict[str, Any] = {}
    for name in names:
        value = getattr(record, name)
        if value is None and name in omit_none:
            continue
        convert = converters.get(name)
        out[name] = convert(value) if convert else _plain(value)
    return out


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
