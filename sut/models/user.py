"""User models: a Python factory, a TorchScript file or a `torch.export` file.

    import:pkg.module:factory        factory() returns an nn.Module (imported, not unpickled)
    torchscript:PATH, or PATH.pt/.ts  read with torch.jit.load (code + tensors, no pickle)
    export:PATH, or PATH.pt2          read with torch.export.load

Inputs come from the module's `input_specs` attribute (TensorSpecs or
(name, datatype, shape) tuples), else from the options `input_name`,
`input_shape` ("3x32x32", batch dim implied) and `input_dtype` (OIP name,
default FP32); a .pt2 file carries its own. Outputs come from `output_specs`,
else from one forward pass on a sample. Inputs are passed positionally in spec
order. The dataset is seeded synthetic data (integers in [0, 2)). The model's
name (as served) is the factory's name or the file's stem.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from oipwire.datatypes import TensorSpec
from sut.errors import ConfigError, ModelLoadError
from sut.models.base import LoadedModel, SyntheticDataset
from sut.tensors import TORCH_DTYPES, oip_datatype

__all__ = ["USER_OPTIONS", "as_outputs", "input_spec_option", "load_user_model", "user_kind"]

USER_OPTIONS = ("input_name", "input_shape", "input_dtype")
_DATASET_SIZE = 1024
_SUFFIXES = {".pt": "torchscript", ".ts": "torchscript", ".pt2": "export"}
_PLATFORMS = {"import": "pytorch", "torchscript": "pytorch_libtorch", "export": "pytorch_export"}


def user_kind(model: str) -> str | None:
    """`import`, `torchscript` or `export` for a user model spec; None for other names."""
    prefix, sep, _ = model.partition(":")
    if sep and prefix in ("import", "torchscript", "export"):
        return prefix
    return _SUFFIXES.get(Path(model).suffix)


def input_spec_option(options: Mapping[str, str]) -> TensorSpec | None:
    """The single input described by the `input_*` options, or None when none are given."""
    if not any(key in options for key in USER_OPTIONS):
        return None
    if "input_shape" not in options:
        raise ConfigError("input_shape", "required with input_name/input_dtype, e.g. 3x32x32")
    try:
        dims = tuple(int(d) for d in options["input_shape"].lower().split("x"))
    except ValueError:
        dims = ()
    if not dims or min(dims) < 1:
        got = options["input_shape"]
        raise ConfigError("input_shape", f"want positive dims like 3x32x32, got {got!r}")
    datatype = options.get("input_dtype", "FP32").upper()
    if datatype not in TORCH_DTYPES:
        raise ConfigError("input_dtype",
                          f"want one of {', '.join(TORCH_DTYPES)}, got {datatype!r}")
    return TensorSpec(options.get("input_name", "input"), datatype, (-1, *dims))


def as_outputs(result: Any, names: Sequence[str]) -> list[torch.Tensor]:
    """A forward result (tensor, tuple/list, or dict by name) as a list in spec order."""
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, Mapping):
        return [result[name] for name in names]
    return list(result)


def load_user_model(model: str, options: Mapping[str, str], seed: int) -> LoadedModel:
    """Load a user model and attach specs and a seeded dataset; ModelLoadError on failure."""
    kind = user_kind(model)
    if kind is None:
        raise ConfigError("model", f"{model!r} is not a user model spec")
    target = model.partition(":")[2] if model.startswith(f"{kind}:") else model
    declared = input_spec_option(options)
    try:
        if kind == "import":
            module = _from_factory(target)
        elif kind == "torchscript":
            module = _from_torchscript(target)
        else:
            module, found = _from_export(target)
            declared = declared or found
    except (ImportError, AttributeError, OSError, RuntimeError, ValueError, TypeError) as exc:
        raise ModelLoadError(f"cannot load {model!r}: {exc}") from exc
    inputs = _specs(module, "input_specs") or ((declared,) if declared else ())
    if not inputs:
        raise ConfigError("input_shape", f"{model!r} declares no input_specs; give input_shape")
    dataset = SyntheticDataset(inputs, _DATASET_SIZE, seed)
    outputs = _specs(module, "output_specs") or _infer_outputs(module, dataset)
    name = target.rpartition(":")[2] if kind == "import" else Path(target).stem
    return LoadedModel(name, _PLATFORMS[kind], module, inputs, outputs, dataset)


def _from_factory(target: str) -> torch.nn.Module:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError("want import:pkg.module:factory")
    built = getattr(importlib.import_module(module_name), attr)()
    if not isinstance(built, torch.nn.Module):
        raise TypeError(f"factory returned {type(built).__name__}, not torch.nn.Module")
    return built.eval()


def _from_torchscript(path: str) -> torch.nn.Module:
    with warnings.catch_warnings():  # TorchScript is deprecated in torch 2.13, still supported
        warnings.filterwarnings("ignore", r".*torch\.jit.*deprecated", DeprecationWarning)
        module: torch.nn.Module = torch.jit.load(  # type: ignore[no-untyped-call]
            path, map_location="cpu"
        )
        return module.eval()


def _from_export(path: str) -> tuple[torch.nn.Module, TensorSpec]:
    program = torch.export.load(path)
    names = program.graph_signature.user_inputs
    if len(names) != 1:
        raise ValueError(f"the program takes {len(names)} inputs; only one is supported")
    node = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name == names[0])
    val = node.meta["val"]
    spec = TensorSpec(names[0], oip_datatype(val.dtype), (-1, *(int(d) for d in val.shape[1:])))
    return program.module(), spec


def _specs(module: torch.nn.Module, attr: str) -> tuple[TensorSpec, ...]:
    value = getattr(module, attr, None)
    if not value:
        return ()
    try:
        specs = tuple(
            v if isinstance(v, TensorSpec) else TensorSpec(v[0], v[1], tuple(v[2])) for v in value
        )
    except (ValueError, TypeError, IndexError) as exc:  # ProtocolError is a ValueError
        raise ModelLoadError(f"bad {attr}: {exc}") from None
    for spec in specs:
        if spec.datatype not in TORCH_DTYPES:
            raise ModelLoadError(f"bad {attr}: {spec.name!r}: datatype {spec.datatype} has no"
                                 f" torch dtype; want one of {', '.join(TORCH_DTYPES)}")
    return specs


def _infer_outputs(module: torch.nn.Module, dataset: SyntheticDataset) -> tuple[TensorSpec, ...]:
    sample = dataset.sample_inputs(np.zeros(1, dtype=np.int64))
    try:
        with torch.inference_mode():
            result = module(*(torch.from_numpy(a) for a in sample.values()))
    except Exception as exc:
        raise ModelLoadError(f"a forward pass on one sample failed: {exc}") from exc
    if isinstance(result, Mapping):
        named = list(result.items())
    else:
        tensors = as_outputs(result, ())
        names = ["output"] if len(tensors) == 1 else [f"output_{i}" for i in range(len(tensors))]
        named = list(zip(names, tensors, strict=True))
    return tuple(
        TensorSpec(name, oip_datatype(t.dtype), (-1, *t.shape[1:])) for name, t in named
    )
