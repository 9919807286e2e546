"""Parse the `key=value` options of `--sut builtin:MODEL,key=value,...`.

Every value arrives as a string; each key has one parser, and an unknown key
or a bad value raises `ConfigError` naming the key.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sut.batcher import BatcherConfig
from sut.errors import ConfigError
from sut.models import MODEL_OPTIONS

__all__ = ["OPTION_HELP", "ServiceOptions", "parse_options"]


@dataclass(frozen=True, slots=True)
class ServiceOptions:
    """How to serve a model; None means 'derive from the machine'."""

    batcher: BatcherConfig = field(default_factory=BatcherConfig)
    device: str = "auto"
    instances: int | None = None
    pipelined: bool | None = None
    cuda_graphs: bool | None = None
    completion_thread: bool = False
    workers: int | None = None
    threads: int | None = None
    precision: str = "fp32"
    seed: int = 0
    warmup: int = 2
    model_options: dict[str, str] = field(default_factory=dict)


def _int(low: int) -> Callable[[str, str], int]:
    def parse(key: str, raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(key, f"want an integer, got {raw!r}") from None
        if value < low:
            raise ConfigError(key, f"must be >= {low}, got {value}")
        return value

    return parse


def _sizes(key: str, raw: str) -> tuple[int, ...]:
    parse = _int(1)
    return tuple(parse(key, part) for part in raw.split(";") if part.strip())


def _flag(key: str, raw: str) -> bool:
    word = raw.strip().lower()
    if word in ("true", "1", "yes", "on"):
        return True
    if word in ("false", "0", "no", "off"):
        return False
    raise ConfigError(key, f"want true or false, got {raw!r}")


def _word(key: str, raw: str) -> str:
    if not raw:
        raise ConfigError(key, "must not be empty")
    return raw.strip().lower()


_PARSERS: dict[str, Callable[[str, str], object]] = {
    "max_batch_size": _int(1),
    "max_queue_delay_us": _int(0),
    "preferred_batch_sizes": _sizes,
    "max_queue_size": _int(0),
    "device": _word,
    "instances": _int(1),
    "pipelined": _flag,
    "cuda_graphs": _flag,
    "completion_thread": _flag,
    "workers": _int(1),
    "threads": _int(1),
    "precision": _word,
    "seed": _int(0),
    "warmup": _int(0),
}

OPTION_HELP: dict[str, str] = {
    "max_batch_size": "rows in a batch at most (default 8)",
    "max_queue_delay_us": "longest wait for batch-mates, from the oldest request (default 100)",
    "preferred_batch_sizes": "sizes dispatched at once, ';'-separated, e.g. 4;8",
    "max_queue_size": "requests waiting before new ones are rejected; 0 = unbounded (default 1024)",
    "device": "cpu, cuda, cuda:N or auto (default)",
    "instances": "workers per device (CPU default min(2, cores), CUDA default 1)",
    "pipelined": "true: a ring of slots per instance, copies and compute overlapped (CUDA"
                 " default); false: one batch at a time per instance (CPU default)",
    "cuda_graphs": "true (CUDA default): replay CUDA graphs per batch-size bucket; false: eager",
    "completion_thread": "pipelines: true = an issue and a completion thread per instance;"
                         " false (default) = one thread launches and hands back",
    "workers": "workers in all, round-robin over devices (instead of instances)",
    "threads": "intra-op threads per worker (default cores // workers)",
    "precision": "fp32 (default), fp16 or bf16; falls back to fp32 where unsupported",
    "seed": "seed of weights and synthetic data (default 0)",
    "warmup": "warm-up rounds before ready (default 2)",
    "input_name": "user models: name of the single input (default input)",
    "input_shape": "user models: input shape without the batch dim, e.g. 3x32x32",
    "input_dtype": "user models: OIP datatype of the input (default FP32)",
}

_BATCHER_KEYS = ("max_batch_size", "max_queue_delay_us", "preferred_batch_sizes", "max_queue_size")


def parse_options(options: Mapping[str, str]) -> ServiceOptions:
    """Typed, validated service options from their strings."""
    values: dict[str, object] = {}
    model_options: dict[str, str] = {}
    for key, raw in options.items():
        if key in MODEL_OPTIONS:
            model_options[key] = raw
        elif key in _PARSERS:
            values[key] = _PARSERS[key](key, raw)
        else:
            close = difflib.get_close_matches(key, list(OPTION_HELP), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ConfigError(key, f"unknown option{hint}; known: {', '.join(sorted(OPTION_HELP))}")
    batcher = BatcherConfig(**{k: values.pop(k) for k in _BATCHER_KEYS if k in values})  # type: ignore[arg-type]
    return ServiceOptions(batcher=batcher, model_options=model_options, **values)  # type: ignore[arg-type]
