"""Open Inference Protocol gRPC stubs, generated from grpc_predict_v2.proto.

    from oipwire.proto import grpc_predict_v2_pb2 as pb
    from oipwire.proto import grpc_predict_v2_pb2_grpc as pb_grpc

The fields are filled and read with `oipwire.grpc_fields` and `oipwire.tensors`.
Regenerate the stubs with `scripts/gen_proto.sh` after editing the .proto.
Importing this package itself imports neither protobuf nor grpc; only its
submodules do.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["PROTO_PATH", "SERVICE_NAME"]

PROTO_PATH = Path(__file__).with_name("grpc_predict_v2.proto")
SERVICE_NAME = "inference.GRPCInferenceService"
