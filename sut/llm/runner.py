"""Run one step on the model: build the paged batch, forward, pick the tokens.

Owns the model, the KV cache tensors and the device. On cuda the forward runs on a CUDA
stream of its own and is timed with CUDA events (synchronised before the time is read); on
CPU with `perf_counter_ns`. The tokens come back to the host once per step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence as Seq

import torch
from torch import nn

from sut.llm.attention import PagedBatch
from sut.llm.model import kv_shape
from sut.llm.sampler import sample
from sut.llm.sequence import Sequence

__all__ = ["ModelRunner", "resolve_device"]

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
           "float64": torch.float64}
_CPU_KV_BYTES = 256 * 2**20


def resolve_device(device: str) -> torch.device:
    """`auto` is cuda when available, else cpu."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def dtype_of(name: str) -> torch.dtype:
    """The torch dtype for a `dtype=` knob value."""
    return _DTYPES[name]


def kv_block_bytes(model: nn.Module, block_size: int, dtype: torch.dtype) -> int:
    """Bytes one KV block takes across all layers (keys and values)."""
    shape = kv_shape(model)
    per_token = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim
    return per_token * block_size * torch.tensor([], dtype=dtype).element_size()


def default_kv_blocks(model: nn.Module, device: torch.device, block_size: int,
                      dtype: torch.dtype, max_seqs: int, max_len: int,
                      gpu_fraction: float) -> int:
    """KV blocks when `num_kv_blocks` is not given: a fraction of free GPU memory on cuda,
    else enough for `max_seqs` sequences of `max_len` within 256 MiB."""
    size = kv_block_bytes(model, block_size, dtype)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return max(1, int(free * gpu_fraction) // size)
    wanted = max_seqs * -(-max_len // block_size)
    return max(1, min(wanted, _CPU_KV_BYTES // size))


class ModelRunner:
    """The model, its KV cache, and one forward per step."""

    def __init__(self, model: nn.Module, device: torch.device, num_blocks: int,
                 block_size: int, dtype: torch.dtype) -> None:
        self.model = model
        self.device = device
        self.block_size = block_size
        kv = kv_shape(model)
        shape = (num_blocks, block_size, kv.num_kv_heads, kv.head_dim)
        self.kv = [(torch.zeros(shape, dtype=dtype, device=device),
                    torch.zeros(shape, dtype=dtype, device=device))
                   for _ in range(kv.num_layers)]
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def batch(self, work: Seq[tuple[Sequence, int]]) -> tuple[torch.Tensor, torch.Tensor,
                                                               PagedBatch]:
        """Tokens, positions and the paged view for `work` (sequence, new tokens)."""
        widest = max(len(seq.blocks) for seq, _ in work)
        tables = [seq.blocks + [0] * (widest - len(seq.blocks)) for seq, _ in work]
        if all(count == 1 for _, count in work):
            return self._decode_batch(work, tables)
        size = self.block_size
        tokens: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        longest = max(n for _, n in work)
        query_index: list[list[int]] = []
        query_positions: list[list[int]] = []
        rows: list[int] = []
        for b, (seq, count) in enumerate(work):
            start = len(tokens)
            first = seq.computed
            span = range(first, first + count)
            tokens.extend(seq.token_at(first, first + count))
            positions.extend(span)
            blocks = seq.blocks
            slots.extend(blocks[p // size] * size + p % size for p in span)
            pad = longest - count
            query_index.append(list(range(start, start + count)) + [0] * pad)
            query_positions.append(list(span) + [0] * pad)
            rows.extend(range(b * longest, b * longest + count))
        flat = self._put([tokens, positions, slots, rows])
        padded = self._put([query_index, query_positions])
        paged = PagedBatch(self.kv, flat[2], self._put(tables), padded[0], padded[1], flat[3])
        return flat[0], flat[1], paged

    def _decode_batch(self, work: Seq[tuple[Sequence, int]],
                      tables: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, PagedBatch]:
        """One new token per sequence (the common step): two host-to-device copies."""
        size = self.block_size
        positions = [seq.computed for seq, _ in work]
        tokens = [seq.prompt[p] if p < len(seq.prompt) else seq.output[p - len(seq.prompt)]
                  for (seq, _), p in zip(work, positions, strict=True)]
        slots = [seq.blocks[p // size] * size + p % size
                 for (seq, _), p in zip(work, positions, strict=True)]
        flat = self._put([tokens, positions, slots, list(range(len(work)))])
        rows = flat[3]
        paged = PagedBatch(self.kv, flat[2], self._put(tables), rows[:, None], flat[1][:, None],
                           rows)
        return flat[0], flat[1], paged

    def _put(self, values: list[list[int]] | list[list[list[int]]]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long).to(self.device, non_blocking=True)

    def step(self, work: Seq[tuple[Sequence, int]]) -> tuple[list[int], int]:
        """Run `work`; the sampled token of each sequence whose tokens are now all computed
        (in work order, others skipped), and the forward time in ns."""
        tokens, positions, paged = self.batch(work)
        ends: list[int] = []
        done: list[Sequence] = []
        total = 0
        for seq, count in work:
            total += count
            if seq.computed + count == seq.num_tokens:
                ends.append(total - 1)
                done.append(seq)
        if self._stream is None:
            began = time.perf_counter_ns()
            with torch.inference_mode():
                logits = self.model(tokens, positions, paged)
                picked = sample(logits[ends], done) if ends else []
            return picked, time.perf_counter_ns() - began
        return self._step_cuda(tokens, positions, paged, ends, done)

    def _step_cuda(self, tokens: torch.Tensor, positions: torch.Tensor, paged: PagedBatch,
                   ends: list[int], done: list[Sequence]) -> tuple[list[int], int]:
        assert self._stream is not None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self._stream.wait_stream(torch.cuda.current_stream(self.device))  # the H2D copies
        with torch.cuda.stream(self._stream), torch.inference_mode():
            start.record()
            logits = self.model(tokens, positions, paged)
            end.record()
            picked = sample(logits[ends], done) if ends else []  # syncs (tolist)
        end.synchronize()
        return picked, int(start.elapsed_time(end) * 1e6)
