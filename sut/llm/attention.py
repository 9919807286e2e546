"""Attention over a paged KV cache: what a model's forward receives and the one call it makes.

A step runs T new tokens of B sequences, flattened. For every attention layer the model
computes q, k, v of shape [T, heads, head_dim] and calls `paged_attention(layer, q, k, v,
batch)`, which writes k and v into the cache slots of those tokens and attends each query to
its own sequence's keys up to its position (causal), read through the sequence's block table.

    kv[layer]        (k_cache, v_cache), each [num_blocks, block_size, heads, head_dim]
    slot_mapping     [T]  flat slot (block * block_size + offset) of each new token
    block_tables     [B, max_blocks]  the blocks of each sequence, in order (padded with 0)
    query_index      [B, Q]  where each sequence's new tokens sit in the flat T (padded 0)
    query_positions  [B, Q]  the position of each such token (padded 0)
    token_rows       [T]  b * Q + i: where flat token t lands in the padded [B, Q] layout

Keys past a query's position are masked, so padding and stale slots never count.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["PagedBatch", "paged_attention"]


@dataclass(slots=True)
class PagedBatch:
    """One step's view of the paged KV cache (every tensor on the model's device)."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    slot_mapping: torch.Tensor
    block_tables: torch.Tensor
    query_index: torch.Tensor
    query_positions: torch.Tensor
    token_rows: torch.Tensor

    def key_mask(self) -> torch.Tensor:
        """[B, 1, Q, L] True where a query may attend a key (key position <= its own)."""
        blocks = self.block_tables.shape[1]
        block_size = self.kv[0][0].shape[1]
        keys = torch.arange(blocks * block_size, device=self.block_tables.device)
        return (keys[None, None, :] <= self.query_positions[:, :, None])[:, None]


def paged_attention(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    batch: PagedBatch, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Store k, v ([T, H, D]) in the cache, attend q ([T, H, D]); returns [T, H, D].

    `mask` is `batch.key_mask()`, passed in by a model that computes it once per step.
    """
    k_cache, v_cache = batch.kv[layer]
    heads, dim = k_cache.shape[2], k_cache.shape[3]
    k_cache.view(-1, heads, dim).index_copy_(0, batch.slot_mapping, k)
    v_cache.view(-1, heads, dim).index_copy_(0, batch.slot_mapping, v)
    seqs, queries = batch.query_index.shape
    keys = k_cache[batch.block_tables].reshape(seqs, -1, heads, dim).transpose(1, 2)
    values = v_cache[batch.block_tables].reshape(seqs, -1, heads, dim).transpose(1, 2)
    padded = q[batch.query_index].transpose(1, 2)  # [B, H, Q, D]
    out = F.scaled_dot_product_attention(padded, keys, values,
                                         attn_mask=batch.key_mask() if mask is None else mask)
    return out.transpose(1, 2).reshape(seqs * queries, heads, dim)[batch.token_rows]
