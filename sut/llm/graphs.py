"""Decode steps at fixed addresses: persistent input buffers, and CUDA graphs per bucket.

A decode step (one new token per sequence) reads four inputs: token ids, positions, slot
mapping and block tables. `DecodeBuffers` keeps them in one host block (pinned on cuda) and
one device block, filled in place each step and sent in one copy; rows past the batch are
padding that writes only to the runner's pad block and reads nothing real.

On cuda, `DecodeGraphs.capture` records the model's decode forward once per (batch bucket,
width bucket): batch sizes 1, 2, 4, ... up to `max_num_seqs`, block-table widths 1, 2, 4, ...
blocks up to a full-length sequence. A step pads its batch and its width up to the next
captured bucket and replays that graph (one launch instead of one per kernel). Each graph is
checked once against the eager forward on the same inputs; any failure (capture or check)
leaves the runner on the eager path with the reason logged and shown in `describe()`.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence as Seq
from dataclasses import dataclass

import torch
from torch import nn

from sut.llm.attention import PagedBatch

__all__ = ["DecodeBuffers", "DecodeGraphs", "bucket_for", "buckets",
           "compare_logits"]

_log = logging.getLogger(__name__)

# Largest difference allowed between a graph's logits and the eager ones, relative to the
# largest eager logit (same kernels, same shapes: they normally agree to the bit).
TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-8, torch.float16: 1e-2,
             torch.bfloat16: 5e-2}


def buckets(limit: int) -> tuple[int, ...]:
    """The captured sizes up to `limit`: powers of two below it, then `limit` itself."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    sizes = [1 << i for i in range(limit.bit_length()) if 1 << i < limit]
    return (*sizes, limit)


def bucket_for(count: int, sizes: Seq[int]) -> int | None:
    """The smallest of `sizes` (ascending) that holds `count`; None when none does."""
    index = bisect.bisect_left(sizes, count)
    return sizes[index] if index < len(sizes) else None


class DecodeBuffers:
    """Token ids, positions, slots and block tables of a decode step, at fixed addresses."""

    def __init__(self, max_seqs: int, max_blocks: int, block_size: int, pad_block: int,
                 device: torch.device) -> None:
        self.max_seqs, self.max_blocks, self.block_size = max_seqs, max_blocks, block_size
        self.pad_block, self.pad_slot = pad_block, pad_block * block_size
        size = max_seqs * (3 + max_blocks)
        on_cuda = device.type == "cuda"
        self.host = torch.zeros(size, dtype=torch.long, pin_memory=on_cuda)
        self.device_block = torch.zeros(size, dtype=torch.long, device=device) if on_cuda \
            else self.host
        host = self.host.numpy()
        seqs = max_seqs
        self._tokens, self._positions = host[:seqs], host[seqs:2 * seqs]
        self._slots = host[2 * seqs:3 * seqs]
        self._tables = host[3 * seqs:].reshape(seqs, max_blocks)
        block = self.device_block
        self.tokens, self.positions = block[:seqs], block[seqs:2 * seqs]
        self.slots = block[2 * seqs:3 * seqs]
        self.tables = block[3 * seqs:].view(seqs, max_blocks)
        self.rows = torch.arange(seqs, device=device)
        self._uploaded = torch.cuda.Event() if on_cuda else None

    def fill(self, tokens: Seq[int], positions: Seq[int], slots: Seq[int],
             tables: Seq[Seq[int]], rows: int, width: int) -> None:
        """Write a step of `len(tokens)` sequences, padded to `rows` rows and `width` blocks."""
        count = len(tokens)
        if not count <= rows <= self.max_seqs or width > self.max_blocks:
            raise ValueError(f"{count} sequences in {rows} rows of {width} blocks do not fit"
                             f" {self.max_seqs} x {self.max_blocks}")
        if self._uploaded is not None:
            self._uploaded.synchronize()  # the last step's copy has left the host block
        self._tokens[:count], self._tokens[count:rows] = tokens, 0
        self._positions[:count], self._positions[count:rows] = positions, 0
        self._slots[:count], self._slots[count:rows] = slots, self.pad_slot
        self._tables[:rows, :width] = self.pad_block
        for row, table in enumerate(tables):
            self._tables[row, :len(table)] = table

    def upload(self, stream: torch.cuda.Stream | None = None) -> None:
        """Send the host block to the device on `stream` (default: the current one; nothing
        to do on cpu)."""
        if self._uploaded is None:
            return
        if stream is None:
            stream = torch.cuda.current_stream(self.device_block.device)
        with torch.cuda.stream(stream):
            self.device_block.copy_(self.host, non_blocking=True)
            self._uploaded.record(stream)

    def view(self, kv: list[tuple[torch.Tensor, torch.Tensor]], rows: int,
             width: int) -> tuple[torch.Tensor, torch.Tensor, PagedBatch]:
        """The model's inputs over the first `rows` rows and `width` blocks."""
        rows_index = self.rows[:rows]
        positions = self.positions[:rows]
        paged = PagedBatch(kv, self.slots[:rows], self.tables[:rows, :width],
                           rows_index[:, None], positions[:, None], rows_index)
        return self.tokens[:rows], positions, paged


@dataclass(slots=True)
class _Graph:
    graph: torch.cuda.CUDAGraph
    logits: torch.Tensor


class DecodeGraphs:
    """One captured decode forward per (batch bucket, width bucket), replayed on a stream."""

    def __init__(self, model: nn.Module, buffers: DecodeBuffers,
                 kv: list[tuple[torch.Tensor, torch.Tensor]], stream: torch.cuda.Stream,
                 max_positions: int) -> None:
        self.model, self.buffers, self.kv, self.stream = model, buffers, kv, stream
        self.max_positions = max_positions
        self.batch_sizes = buckets(buffers.max_seqs)
        self.widths = buckets(buffers.max_blocks)
        self._graphs: dict[tuple[int, int], _Graph] = {}

    def pick(self, count: int, widest: int) -> tuple[int, int] | None:
        """The (rows, width) bucket a step of `count` sequences up to `widest` blocks replays."""
        rows, width = bucket_for(count, self.batch_sizes), bucket_for(widest, self.widths)
        if rows is None or width is None:
            return None
        return rows, width

    def replay(self, rows: int, width: int) -> torch.Tensor:
        """Run the captured step (inputs already in the buffers); its logits [rows, vocab]."""
        entry = self._graphs[(rows, width)]
        entry.graph.replay()
        return entry.logits

    def capture(self) -> None:
        """Capture every bucket, largest first so smaller ones reuse its memory pool."""
        pool = torch.cuda.graph_pool_handle()
        for rows in reversed(self.batch_sizes):
            for width in reversed(self.widths):
                self._synthetic(rows, width)
                inputs = self.buffers.view(self.kv, rows, width)
                with torch.cuda.stream(self.stream):
                    for _ in range(2):  # warm-up on the capture stream (lazy init, autotune)
                        self.model(*inputs)
                self.stream.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=self.stream):
                    logits = self.model(*inputs)
                self._graphs[(rows, width)] = _Graph(graph, logits)

    def check(self) -> str | None:
        """Replay each graph against the eager forward on the same synthetic step; the first
        mismatch, described, or None when all agree."""
        tolerance = TOLERANCE.get(self.kv[0][0].dtype, 1e-2)
        used = min(self.buffers.pad_block, self.buffers.max_seqs * self.buffers.max_blocks)
        for keys, values in self.kv:  # cached keys worth attending to, wiped afterwards
            keys[:used].normal_()
            values[:used].normal_()
        self.stream.wait_stream(torch.cuda.current_stream(self.stream.device))
        try:
            return self._check_each(tolerance)
        finally:
            for keys, values in self.kv:
                keys[:used].zero_()
                values[:used].zero_()
            torch.cuda.synchronize(self.stream.device)

    def _check_each(self, tolerance: float) -> str | None:
        for (rows, width), entry in self._graphs.items():
            self._synthetic(rows, width)
            with torch.cuda.stream(self.stream):
                eager = self.model(*self.buffers.view(self.kv, rows, width)).clone()
                entry.graph.replay()
                replayed = entry.logits.clone()
            self.stream.synchronize()
            problem = compare_logits(replayed, eager, tolerance)
            if problem is not None:
                return f"the graph at batch {rows}, width {width} blocks {problem}"
        return None

    def _synthetic(self, rows: int, width: int) -> None:
        """A decode step of `rows` sequences spanning `width` blocks each, whose new keys go to
        the pad block (so nothing read is written and eager and replay see the same cache)."""
        blocks = self.buffers.pad_block  # the real blocks are 0 .. pad_block - 1
        size = self.buffers.block_size
        tables = [[(row * width + col) % blocks for col in range(width)] for row in range(rows)]
        positions = [min(width * size - 1 - row % size, self.max_positions - 1)
                     for row in range(rows)]
        tokens = [(row * 7 + 65) % 256 for row in range(rows)]
        self.buffers.fill(tokens, positions, [self.buffers.pad_slot] * rows, tables, rows,
                          width)
        self.buffers.upload(self.stream)


def compare_logits(got: torch.Tensor, want: torch.Tensor, tolerance: float) -> str | None:
    """What is wrong with `got` against `want` (the same -inf, finite values within
    `tolerance` of the largest finite one), or None when they agree."""
    finite = torch.isfinite(want)
    if not torch.equal(finite, torch.isfinite(got)):
        return "has non-finite logits where eager has none (or the reverse)"
    scale = max(1.0, float(want[finite].abs().max())) if bool(finite.any()) else 1.0
    worst = float((got[finite] - want[finite]).abs().max()) if bool(finite.any()) else 0.0
    if worst > tolerance * scale:
        return f"differs from eager by {worst:.3g} (allowed {tolerance * scale:.3g})"
    return None
