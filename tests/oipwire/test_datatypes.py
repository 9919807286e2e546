"""Tests for oipwire.datatypes: the one datatype table, and the tensor spec (no sockets)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import oipwire as p
from oipwire import ProtocolError, TensorSpec


def test_datatype_mapping_both_ways() -> None:
    for datatype in p.DATATYPES:
        assert p.datatype_of(p.numpy_dtype(datatype)) == datatype
    assert p.datatype_of(np.dtype(">f4")) == "FP32"
    assert p.datatype_of(np.dtype("S3")) == "BYTES"
    with pytest.raises(ProtocolError, match="BF16 is not supported"):
        p.numpy_dtype("BF16")
    with pytest.raises(ProtocolError, match="unknown datatype 'FLOAT'"):
        p.numpy_dtype("FLOAT")
    with pytest.raises(ProtocolError, match="complex128"):
        p.datatype_of(np.dtype(complex))


def test_element_count() -> None:
    assert p.element_count((2, 3), "t") == 6 and p.element_count((), "t") == 1
    assert p.element_count((0, 2**40), "t") == 0
    for bad in ((-1, 2), (2.0,), (True,), (1,) * (p.MAX_DIMS + 1)):
        with pytest.raises(ProtocolError, match="'t'|t: shape"):
            p.element_count(bad, "t")
    with pytest.raises(ProtocolError, match="too large"):
        p.element_count((2**40, 2**40), "t")


def test_tensor_spec_checks_and_normalises() -> None:
    spec = TensorSpec("x", "FP32", [-1, np.int64(4)])  # type: ignore[arg-type]
    assert spec == TensorSpec("x", "FP32", (-1, 4)) and type(spec.shape[1]) is int
    assert hash(spec) == hash(TensorSpec("x", "FP32", (-1, 4)))
    for args, message in [(("x", "FP33", (1,)), "unknown datatype 'FP33'"),
                          (("x", "BF16", (1,)), "BF16"),
                          (("x", "FP32", (-2,)), "'x': bad metadata shape \\[-2\\]"),
                          (("x", "FP32", (1.5,)), "bad metadata shape"),
                          (("x", "FP32", (True,)), "bad metadata shape"),
                          ((3, "FP32", (1,)), "not a string")]:
        with pytest.raises(ProtocolError, match=message):
            TensorSpec(*args)


def test_tensor_spec_metadata_entry_both_ways() -> None:
    entry = {"name": "ids", "datatype": "INT64", "shape": [-1, 128]}
    spec = TensorSpec.from_metadata(entry)
    assert spec == TensorSpec("ids", "INT64", (-1, 128)) and spec.to_metadata() == entry
    bad: list[Any] = [{"name": "x", "datatype": "FP32"}, "x", None,
                      {"name": "x", "datatype": "FP32", "shape": "12"},
                      {"name": "x", "datatype": "X", "shape": [1]},
                      {"name": "x", "datatype": "FP32", "shape": [1, "2"]}]
    for item in bad:
        with pytest.raises(ProtocolError):
            TensorSpec.from_metadata(item)


def test_model_metadata_takes_specs_and_tuples() -> None:
    spec = TensorSpec("x", "FP32", (-1, 4))
    doc = p.model_metadata("m", ["1"], "pytorch", [spec], [("y", "INT64", [-1])])
    assert doc["inputs"] == [spec.to_metadata()]
    assert [TensorSpec.from_metadata(e) for e in doc["outputs"]] == [
        TensorSpec("y", "INT64", (-1,))]
