"""Parse the `key=value` options of `--sut builtin:MODEL,key=value,...`.

Every value arrives as a string; each key has one parser (`sut.optionwords`), and an
unknown key or a bad value raises `ConfigError` naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sut.batcher import BatcherConfig
from sut.models import MODEL_OPTIONS
from sut.optionwords import Parser, at_least, auto_flag, flag, parse_words, word

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
    start_from_device: bool | None = None
    workers: int | None = None
    threads: int | None = None
    precision: str = "fp32"
    seed: int = 0
    warmup: int = 2
    model_options: dict[str, str] = field(default_factory=dict)


def _sizes(key: str, raw: str) -> tuple[int, ...]:
    parse = at_least(1)
    return tuple(parse(key, part) for part in raw.split(";") if part.strip())


_PARSERS: dict[str, Parser] = {
    "max_batch_size": at_least(1),
    "max_queue_delay_us": at_least(0),
    "preferred_batch_sizes": _sizes,
    "max_queue_size": at_least(0),
    "device": word,
    "instances": at_least(1),
    "pipelined": flag,
    "cuda_graphs": flag,
    "completion_thread": flag,
    "start_from_device": auto_flag,
    "workers": at_least(1),
    "threads": at_least(1),
    "precision": word,
    "seed": at_least(0),
    "warmup": at_least(0),
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
    "start_from_device": "auto (default), true or false: the in-process adapter's samples"
                         " copied to each GPU before the run, batches sent as indices"
                         " (auto: on CUDA when they take <= 1/8 of free memory; never on"
                         " the CPU, nor over HTTP/gRPC)",
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
    model_options = {key: raw for key, raw in options.items() if key in MODEL_OPTIONS}
    values = parse_words({key: raw for key, raw in options.items() if key not in MODEL_OPTIONS},
                         _PARSERS, "option", OPTION_HELP)
    batcher = BatcherConfig(**{k: values.pop(k) for k in _BATCHER_KEYS if k in values})  # type: ignore[arg-type]
    return ServiceOptions(batcher=batcher, model_options=model_options, **values)  # type: ignore[arg-type]
