"""The engine's knobs, named as vLLM names them where they mean the same, parsed from text.

    max_num_seqs=32              sequences running at once (a decode batch at most this big)
    max_num_batched_tokens=512   tokens one step computes (decodes + prefill chunks)
    block_size=16                tokens per KV block
    num_kv_blocks=N              KV blocks; default: gpu_memory_utilization of free GPU
                                 memory on cuda, else enough for max_num_seqs full
                                 sequences within 256 MiB
    gpu_memory_utilization=0.5   fraction of free GPU memory the KV cache may take (cuda)
    enable_chunked_prefill=true  a long prompt is prefilled in chunks within the step budget
    enable_prefix_caching=true   full blocks of an earlier prompt are reused, not recomputed
    stream_interval=1            tokens between stream emits (the last one always emits)
    scheduler=continuous         continuous (iteration-level) or static (request-level)
    scheduling_policy=fcfs       fcfs or priority (lower value first; ties by arrival)
    max_waiting=256              requests waiting at most; one more is refused (429)
    max_model_len=N              longest prompt + output (default: the model's positions)
    device=auto                  auto (cuda when available), cpu, cuda, cuda:N
    dtype=float32                float32, float16, bfloat16 or float64
    seed=0                       the weights' seed
    cuda_graphs=true             decode steps replay CUDA graphs captured per batch and
                                 width bucket (cuda only; eager when off or when a graph
                                 fails its check at load)
    trace_steps=1024             steps kept in the per-step trace
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from sut.errors import ConfigError
from sut.optionwords import Parser, flag, integer, number, parse_words, word

__all__ = ["DTYPES", "KNOB_HELP", "EngineConfig", "parse_engine_options"]

DTYPES = ("bfloat16", "float16", "float32", "float64")


KNOB_HELP = {
    "max_num_seqs": "sequences running at once",
    "max_num_batched_tokens": "tokens one step computes (decodes + prefill chunks)",
    "block_size": "tokens per KV block",
    "num_kv_blocks": "KV blocks (default: from gpu_memory_utilization on cuda, else enough"
                     " for max_num_seqs full sequences within 256 MiB)",
    "gpu_memory_utilization": "fraction of free GPU memory the KV cache may take",
    "enable_chunked_prefill": "prefill long prompts in chunks within the step budget",
    "enable_prefix_caching": "reuse full KV blocks of earlier prompts",
    "stream_interval": "tokens between stream emits",
    "scheduler": "continuous (iteration-level) or static (request-level)",
    "scheduling_policy": "fcfs or priority (lower value first)",
    "max_waiting": "requests waiting at most; one more gets 429",
    "max_model_len": "longest prompt + output (default: the model's positions)",
    "device": "auto, cpu, cuda or cuda:N",
    "dtype": "float32, float16, bfloat16 or float64",
    "seed": "the weights' seed",
    "cuda_graphs": "decode on CUDA graphs per batch/width bucket (cuda only)",
    "trace_steps": "steps kept in the per-step trace (/debug/steps)",
}


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What the engine was asked for; see the module docstring for each knob."""

    max_num_seqs: int = 32
    max_num_batched_tokens: int = 512
    block_size: int = 16
    num_kv_blocks: int | None = None
    gpu_memory_utilization: float = 0.5
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    stream_interval: int = 1
    scheduler: str = "continuous"
    scheduling_policy: str = "fcfs"
    max_waiting: int = 256
    max_model_len: int | None = None
    device: str = "auto"
    dtype: str = "float32"
    seed: int = 0
    cuda_graphs: bool = True
    trace_steps: int = 1024

    def __post_init__(self) -> None:
        for key in ("max_num_seqs", "max_num_batched_tokens", "block_size", "stream_interval",
                    "max_waiting", "trace_steps"):
            if getattr(self, key) < 1:
                raise ConfigError(key, f"must be >= 1, got {getattr(self, key)}")
        for key in ("num_kv_blocks", "max_model_len"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise ConfigError(key, f"must be >= 1, got {getattr(self, key)}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError("gpu_memory_utilization", "must be in (0, 1]")
        _choice("scheduler", self.scheduler, ("continuous", "static"))
        _choice("scheduling_policy", self.scheduling_policy, ("fcfs", "priority"))
        _choice("dtype", self.dtype, DTYPES)
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise ConfigError("device", f"want auto, cpu, cuda or cuda:N, got {self.device!r}")


def _choice(key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(key, f"want one of {', '.join(allowed)}, got {value!r}")


_PARSERS: dict[str, Parser] = {
    field.name: {"int": integer, "int | None": integer, "float": number, "bool": flag,
                 "str": word}[str(field.type)]
    for field in dataclasses.fields(EngineConfig)
}


def parse_engine_options(options: Mapping[str, str]) -> EngineConfig:
    """An `EngineConfig` from `key=value` text; ConfigError names an unknown key or bad value."""
    return EngineConfig(**parse_words(options, _PARSERS, "engine option"))  # type: ignore[arg-type]
