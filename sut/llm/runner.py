"""Run one step on the model: build the paged batch, forward, pick the tokens.

Owns the model, the KV cache tensors (plus one pad block that padded rows write to) and the
device. A decode step (one token per sequence) goes through `DecodeBuffers` (inputs at fixed
addresses, one host-to-device copy) and, on cuda with `cuda_graphs`, replays the CUDA graph
of its bucket (`sut.llm.graphs`); a step with prefill tokens builds its tensors afresh and runs
eagerly. On cuda the forward runs on a stream of its own, timed with CUDA events; on cpu with
`perf_counter_ns`. The tokens come back to the host once per step (greedy picks are taken on
the device; on cuda copied into pinned memory behind the forward, without waiting); `while_computing`, when set,
runs between the launch and that read (on cuda it overlaps the device's work; on cpu it runs
once the inputs are built, before the forward), so the caller's host work for the previous
step costs no step time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from collections.abc import Sequence as Seq
from typing import Any

import torch
from torch import nn

from sut.llm.attention import PagedBatch
from sut.llm.graphs import DecodeBuffers, DecodeGraphs
from sut.llm.model import kv_shape
from sut.llm.sampler import is_greedy, sample
from sut.llm.sequence import Sequence
from sut.llm.tokenizer import EOS

__all__ = ["ModelRunner", "resolve_device"]

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
           "float64": torch.float64}
_CPU_KV_BYTES = 256 * 2**20

_log = logging.getLogger(__name__)


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
        return max(1, int(free * gpu_fraction) // size - 1)  # one more is the pad block
    wanted = max_seqs * -(-max_len // block_size)
    return max(1, min(wanted, _CPU_KV_BYTES // size))


class ModelRunner:
    """The model, its KV cache, and one forward per step."""

    def __init__(self, model: nn.Module, device: torch.device, num_blocks: int,
                 block_size: int, dtype: torch.dtype, max_seqs: int = 32,
                 max_len: int | None = None, cuda_graphs: bool = True) -> None:
        self.model = model
        self.device = device
        self.block_size = block_size
        self.num_blocks = num_blocks  # the engine's; block num_blocks is the pad block
        kv = kv_shape(model)
        shape = (num_blocks + 1, block_size, kv.num_kv_heads, kv.head_dim)
        self.kv = [(torch.zeros(shape, dtype=dtype, device=device),
                    torch.zeros(shape, dtype=dtype, device=device))
                   for _ in range(kv.num_layers)]
        self._stream = (torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
                        if device.type == "cuda" else None)
        max_blocks = -(-(max_len or kv.max_positions) // block_size)
        self.decode_buffers = DecodeBuffers(max_seqs, max_blocks, block_size, num_blocks,
                                            device)
        self.while_computing: Callable[[], None] | None = None
        self._picked = torch.zeros(max_seqs, dtype=torch.long,  # greedy tokens land here
                                   pin_memory=device.type == "cuda")
        if self._stream is not None:  # the weights, cache and buffers were made on the
            torch.cuda.synchronize(device)  # current stream; capture and steps run on ours
        self.graphs: DecodeGraphs | None = None
        self.decode_path: dict[str, Any] = self._prepare_graphs(cuda_graphs, kv.max_positions)

    def _prepare_graphs(self, wanted: bool, max_positions: int) -> dict[str, Any]:
        """Capture and check the decode graphs; the path decode steps take, and why."""
        if not wanted:
            return {"path": "eager", "reason": "cuda_graphs=false"}
        if self._stream is None:
            return {"path": "eager", "reason": f"CUDA graphs need a CUDA device ({self.device})"}
        graphs = DecodeGraphs(self.model, self.decode_buffers, self.kv, self._stream,
                              max_positions)
        began = time.perf_counter_ns()
        try:
            with torch.inference_mode():
                graphs.capture()
                problem = graphs.check()
        except Exception as exc:  # noqa: BLE001 (any capture failure means: stay eager)
            problem = f"capture failed: {type(exc).__name__}: {exc}"
        if problem is not None:
            _log.warning("decode stays eager: %s", problem)
            return {"path": "eager", "reason": problem}
        self.graphs = graphs
        return {"path": "cuda_graphs", "reason": None, "batch_buckets": list(graphs.batch_sizes),
                "width_buckets": list(graphs.widths),
                "capture_ms": round((time.perf_counter_ns() - began) / 1e6, 1)}

    def batch(self, work: Seq[tuple[Sequence, int]]) -> tuple[torch.Tensor, torch.Tensor,
                                                               PagedBatch]:
        """Tokens, positions and the paged view for `work` (sequence, new tokens), built
        afresh (the path of a step with prefill tokens)."""
        widest = max(len(seq.blocks) for seq, _ in work)
        tables = [seq.blocks + [0] * (widest - len(seq.blocks)) for seq, _ in work]
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

    def _put(self, values: list[list[int]] | list[list[list[int]]]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long).to(self.device, non_blocking=True)

    def decode_shape(self, work: Seq[tuple[Sequence, int]]) -> tuple[int, int, bool] | None:
        """(rows, width, replay) of a decode step through the persistent buffers: rows and
        width padded to a captured bucket when `replay`; None for a step that is not a decode
        or does not fit the buffers."""
        if any(count != 1 for _, count in work) or len(work) > self.decode_buffers.max_seqs:
            return None
        widest = max(len(seq.blocks) for seq, _ in work)
        if widest > self.decode_buffers.max_blocks:
            return None
        bucket = self.graphs.pick(len(work), widest) if self.graphs is not None else None
        if bucket is None:
            return len(work), widest, False
        return bucket[0], bucket[1], True

    def _stage_decode(self, work: Seq[tuple[Sequence, int]],
                      shape: tuple[int, int, bool]) -> None:
        """Fill the decode buffers for `work`, padded to `shape`, and send them."""
        rows, width, _ = shape
        size = self.block_size
        positions = [seq.computed for seq, _ in work]
        tokens = [seq.prompt[p] if p < len(seq.prompt) else seq.output[p - len(seq.prompt)]
                  for (seq, _), p in zip(work, positions, strict=True)]
        slots = [seq.blocks[p // size] * size + p % size
                 for (seq, _), p in zip(work, positions, strict=True)]
        buffers = self.decode_buffers
        buffers.fill(tokens, positions, slots, [seq.blocks for seq, _ in work], rows, width)
        buffers.upload(self._stream)

    def _run_decode(self, count: int, shape: tuple[int, int, bool]) -> torch.Tensor:
        """The staged decode step of `count` sequences: its logits [count, vocab]."""
        rows, width, replay = shape
        if replay:
            assert self.graphs is not None
            return self.graphs.replay(rows, width)[:count]
        logits: torch.Tensor = self.model(*self.decode_buffers.view(self.kv, rows, width))
        return logits[:count]

    def step(self, work: Seq[tuple[Sequence, int]]) -> tuple[list[int], int]:
        """Run `work`; the sampled token of each sequence whose tokens are now all computed
        (in work order, others skipped), and the forward time in ns."""
        ends: list[int] = []
        done: list[Sequence] = []
        total = 0
        for seq, count in work:
            total += count
            if seq.computed + count == seq.num_tokens:
                ends.append(total - 1)
                done.append(seq)
        shape = self.decode_shape(work)
        if self._stream is None:
            with torch.inference_mode():
                if shape is not None:
                    self._stage_decode(work, shape)
                else:
                    inputs = self.batch(work)
                self._meanwhile()  # after the inputs are read off the sequences
                began = time.perf_counter_ns()
                logits = self._run_decode(len(work), shape) if shape is not None \
                    else self.model(*inputs)
                greedy = _greedy(logits, ends, done)
                picked = greedy.tolist() if greedy is not None \
                    else sample(_rows(logits, ends), done) if ends else []
            return picked, time.perf_counter_ns() - began
        return self._step_cuda(work, shape, ends, done)

    def _step_cuda(self, work: Seq[tuple[Sequence, int]], shape: tuple[int, int, bool] | None,
                   ends: list[int], done: list[Sequence]) -> tuple[list[int], int]:
        assert self._stream is not None
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        with torch.inference_mode():
            if shape is None:  # the fresh tensors go on the current stream
                inputs = self.batch(work)
            # whatever the current stream did before (fresh tensors, a caller's writes to the
            # cache or buffers) happens before this step
            self._stream.wait_stream(torch.cuda.current_stream(self.device))
            if shape is not None:
                self._stage_decode(work, shape)  # its copy goes on our stream
            with torch.cuda.stream(self._stream):
                start.record()
                logits = self._run_decode(len(work), shape) if shape is not None \
                    else self.model(*inputs)
                end.record()
                landed = self._greedy_to_host(logits, ends, done)
            self._meanwhile()  # the device computes while the host does this
            if landed is not None:
                landed.synchronize()
                picked = self._picked[:len(ends)].tolist()
            else:
                with torch.cuda.stream(self._stream):
                    picked = sample(_rows(logits, ends), done) if ends else []  # syncs
        end.synchronize()
        return picked, int(start.elapsed_time(end) * 1e6)

    def _greedy_to_host(self, logits: torch.Tensor, ends: list[int],
                        done: list[Sequence]) -> torch.cuda.Event | None:
        """Start the greedy picks and their copy into pinned memory, without waiting; the
        event that says they landed, or None when `sample` must pick (see `_greedy`)."""
        if len(ends) > len(self._picked):
            return None
        greedy = _greedy(logits, ends, done)
        if greedy is None:
            return None
        self._picked[:len(ends)].copy_(greedy, non_blocking=True)
        landed = torch.cuda.Event()  # type: ignore[no-untyped-call]
        landed.record()
        return landed

    def _meanwhile(self) -> None:
        if self.while_computing is not None:
            self.while_computing()


def _rows(logits: torch.Tensor, ends: list[int]) -> torch.Tensor:
    """The logits rows `ends` (every row, as is, for a decode step; no list indexing, which
    torch runs far slower than `index_select`)."""
    if ends == list(range(logits.shape[0])):
        return logits
    return logits.index_select(0, torch.tensor(ends, device=logits.device))


def _greedy(logits: torch.Tensor, ends: list[int], done: list[Sequence]) -> torch.Tensor | None:
    """The greedy picks of rows `ends` on the logits' device, by `sample`'s rule for greedy
    rows (EOS masked where it would not end the sequence, then argmax); None when a row
    samples, when EOS is masked in some rows only, or when nothing is picked: `sample` then
    decides."""
    if not ends or any(not is_greedy(seq.params) for seq in done):
        return None
    allowed = {seq.eos_allowed() for seq in done}
    if len(allowed) > 1:
        return None
    rows = _rows(logits, ends)
    if allowed == {False}:
        rows = rows.clone()
        rows[:, EOS] = float("-inf")
    return rows.argmax(dim=-1)
