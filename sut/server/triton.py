"""Triton's extension documents as plain dicts: model configuration and repository index.

Pure functions over the model metadata, the batcher knobs and the worker devices; no
aiohttp, grpc or protobuf. The dicts are Triton's JSON shape (the HTTP answers), and the
gRPC server fills `inference.ModelConfig` from the very same dict, so both protocols say
the same thing. Field names follow Triton's model_config.proto:

    name, platform, backend, max_batch_size,
    input/output: [{name, data_type: "TYPE_FP32", dims}]   (dims without the batch dim
                                                            when max_batch_size > 0)
    dynamic_batching: {preferred_batch_size, max_queue_delay_microseconds}
    instance_group: [{name, kind: "KIND_CPU" | "KIND_GPU", count, gpus}]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import oipwire as p

if TYPE_CHECKING:
    from sut.batcher import BatcherConfig
    from sut.service import ModelMetadata

__all__ = ["READY", "UNAVAILABLE", "config_datatype", "model_config", "repository_index"]

READY = "READY"
UNAVAILABLE = "UNAVAILABLE"

# OIP datatype -> Triton's DataType enum name; BYTES is TYPE_STRING there.
_CONFIG_TYPES = {"BYTES": "TYPE_STRING"}


def config_datatype(datatype: str) -> str:
    """Triton's `DataType` name for an OIP datatype (`FP32` -> `TYPE_FP32`)."""
    if datatype not in p.DATATYPES:
        raise ValueError(f"unknown datatype {datatype!r}")
    return _CONFIG_TYPES.get(datatype, f"TYPE_{datatype}")


def model_config(meta: ModelMetadata, knobs: BatcherConfig,
                 devices: Sequence[str]) -> dict[str, Any]:
    """The model configuration in Triton's JSON shape; `devices` has one entry per worker."""
    batched = meta.max_batch_size > 0

    def tensor(spec: p.TensorSpec) -> dict[str, Any]:
        dims = list(spec.shape[1:] if batched else spec.shape)
        return {"name": spec.name, "data_type": config_datatype(spec.datatype), "dims": dims}

    return {
        "name": meta.name,
        "platform": meta.platform,
        "backend": meta.platform,
        "max_batch_size": meta.max_batch_size,
        "input": [{**tensor(s), "format": "FORMAT_NONE"} for s in meta.inputs],
        "output": [tensor(s) for s in meta.outputs],
        "dynamic_batching": {
            "preferred_batch_size": list(knobs.preferred_batch_sizes),
            "max_queue_delay_microseconds": knobs.max_queue_delay_us,
        },
        "instance_group": _instance_groups(meta.name, devices),
    }


def _instance_groups(name: str, devices: Sequence[str]) -> list[dict[str, Any]]:
    groups = []
    for i, (device, count) in enumerate(sorted(Counter(devices).items())):
        group: dict[str, Any] = {"name": f"{name}_{i}", "kind": "KIND_CPU", "count": count,
                                 "gpus": []}
        if device.startswith("cuda"):
            index = device.partition(":")[2]
            group.update(kind="KIND_GPU", gpus=[int(index) if index.isdigit() else 0])
        groups.append(group)
    return groups


def repository_index(name: str, versions: Sequence[str], ready: bool, reason: str = "",
                     ready_only: bool = False) -> list[dict[str, str]]:
    """Triton's repository index: one entry per version; none but ready ones if `ready_only`."""
    if ready_only and not ready:
        return []
    entry = {"name": name, "state": READY if ready else UNAVAILABLE}
    if not ready:
        entry["reason"] = reason
    return [{**entry, "version": version} for version in versions]
