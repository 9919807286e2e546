"""The inference request and response, as values: what both encodings (REST, gRPC) carry.

The model name and version of a request travel in the URL (REST) or the gRPC message, not
here. A response's `parameters` carry the server's timings (`oipwire.timing`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from oipwire.tensors import InferTensor, ParamValue

__all__ = ["InferRequest", "InferResponse", "RequestedOutput"]


@dataclass(frozen=True, slots=True)
class RequestedOutput:
    """An output the client asks for; `binary_data=None` follows `binary_data_output`."""

    name: str
    binary_data: bool | None = None
    parameters: dict[str, ParamValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InferRequest:
    """An inference request; the model name and version travel in the URL or gRPC message."""

    id: str = ""
    inputs: tuple[InferTensor, ...] = ()
    outputs_requested: tuple[RequestedOutput, ...] = ()  # empty: every output
    parameters: dict[str, ParamValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InferResponse:
    """An inference response; server timings go in `parameters` (see `oipwire.timing`)."""

    model_name: str
    model_version: str = ""
    id: str = ""
    outputs: tuple[InferTensor, ...] = ()
    parameters: dict[str, ParamValue] = field(default_factory=dict)
