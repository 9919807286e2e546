"""Tests for oipwire.timing: one vocabulary of server timings, both directions (no sockets)."""

from __future__ import annotations

import pytest

from oipwire import timing


def test_every_component_has_its_parameter() -> None:
    assert timing.COMPONENTS == ("queue", "batch_formation", "h2d", "compute", "d2h",
                                 "postprocess", "server_total")
    assert timing.TIMING_PARAMETERS == (*(f"{c}_ns" for c in timing.COMPONENTS), "batch_size")
    assert dict(timing.PARAMETER_COMPONENTS) == {
        **{f"{c}_ns": c for c in timing.COMPONENTS}, "batch_size": "batch_size"}
    constants = {name: value for name, value in vars(timing).items()
                 if name.isupper() and isinstance(value, str)}
    for component in timing.COMPONENTS:
        assert constants[component.upper()] == component
        assert constants[component.upper() + "_NS"] == timing.parameter_name(component)


def test_parameters_and_back() -> None:
    measured = {c: 1000 + i for i, c in enumerate(timing.COMPONENTS)}
    params = timing.timing_parameters(measured, 8)
    assert set(params) == set(timing.TIMING_PARAMETERS)
    assert timing.components({**params, "other": 5, "note": "x"}) == {**measured,
                                                                     "batch_size": 8}
    assert timing.components({"queue_ns": "1", "compute_ns": 2.5}) == {}
    assert timing.timing_parameters({}, 1) == {"batch_size": 1}


def test_an_unknown_component_is_refused() -> None:
    with pytest.raises(ValueError, match="warmup"):
        timing.timing_parameters({"queue": 1, "warmup": 2}, 1)
