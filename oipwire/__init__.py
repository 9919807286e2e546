"""oipwire: the Open Inference Protocol (KServe v2 / Triton) on the wire, for both sides.

A neutral package that `loadgen` (the client) and `sut` (the server) both import and
neither owns: pure functions over bytes, dicts and numpy, with no socket, no aiohttp and
no grpc (importing `oipwire` imports numpy only). One module, one job:

    errors       ProtocolError, the one error of malformed input
    datatypes    the datatype table (wire name -> numpy dtype), TensorSpec
    tensors      InferTensor, and its raw bytes and typed values
    messages     InferRequest, RequestedOutput, InferResponse
    codec        HTTP/REST bodies (JSON + binary tensor data) and metadata documents
    grpc_fields  which gRPC message field carries a tensor's values or a parameter
    timing       the server timings: component names and response parameters
    proto        the gRPC .proto and generated stubs (imports protobuf and grpc;
                 not imported here: `from oipwire.proto import grpc_predict_v2_pb2`)

This face re-exports every name in those modules' `__all__` (proto aside).
"""

from __future__ import annotations

from oipwire.codec import (
    BINARY_CONTENT_TYPE,
    BINARY_DATA,
    BINARY_DATA_OUTPUT,
    BINARY_DATA_SIZE,
    EXTENSION_BINARY_TENSOR_DATA,
    HEADER_LENGTH,
    JSON_CONTENT_TYPE,
    binary_outputs_requested,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    error_body,
    model_metadata,
    server_metadata,
)
from oipwire.datatypes import (
    DATATYPES,
    MAX_DIMS,
    TensorSpec,
    datatype_of,
    element_count,
    numpy_dtype,
)
from oipwire.errors import (
    ProtocolError,
)
from oipwire.grpc_fields import (
    contents_field,
    parameter_field,
    tensor_from_contents,
    tensor_to_contents,
)
from oipwire.messages import (
    InferRequest,
    InferResponse,
    RequestedOutput,
)
from oipwire.tensors import (
    InferTensor,
    ParamValue,
    raw_array,
    tensor_from_raw,
    tensor_to_raw,
    values_array,
)
from oipwire.timing import (
    BATCH_FORMATION,
    BATCH_FORMATION_NS,
    BATCH_SIZE,
    COMPONENTS,
    COMPUTE,
    COMPUTE_NS,
    D2H,
    D2H_NS,
    H2D,
    H2D_NS,
    PARAMETER_COMPONENTS,
    POSTPROCESS,
    POSTPROCESS_NS,
    QUEUE,
    QUEUE_NS,
    SERVER_TOTAL,
    SERVER_TOTAL_NS,
    TIMING_PARAMETERS,
    components,
    parameter_name,
    timing_parameters,
)

__all__ = [
    "BATCH_FORMATION",
    "BATCH_FORMATION_NS",
    "BATCH_SIZE",
    "BINARY_CONTENT_TYPE",
    "BINARY_DATA",
    "BINARY_DATA_OUTPUT",
    "BINARY_DATA_SIZE",
    "COMPONENTS",
    "COMPUTE",
    "COMPUTE_NS",
    "D2H",
    "D2H_NS",
    "DATATYPES",
    "EXTENSION_BINARY_TENSOR_DATA",
    "H2D",
    "H2D_NS",
    "HEADER_LENGTH",
    "JSON_CONTENT_TYPE",
    "MAX_DIMS",
    "PARAMETER_COMPONENTS",
    "POSTPROCESS",
    "POSTPROCESS_NS",
    "QUEUE",
    "QUEUE_NS",
    "SERVER_TOTAL",
    "SERVER_TOTAL_NS",
    "TIMING_PARAMETERS",
    "InferRequest",
    "InferResponse",
    "InferTensor",
    "ParamValue",
    "ProtocolError",
    "RequestedOutput",
    "TensorSpec",
    "binary_outputs_requested",
    "components",
    "contents_field",
    "datatype_of",
    "decode_request",
    "decode_response",
    "element_count",
    "encode_request",
    "encode_response",
    "error_body",
    "model_metadata",
    "numpy_dtype",
    "parameter_field",
    "parameter_name",
    "raw_array",
    "server_metadata",
    "tensor_from_contents",
    "tensor_from_raw",
    "tensor_to_contents",
    "tensor_to_raw",
    "timing_parameters",
    "values_array",
]
