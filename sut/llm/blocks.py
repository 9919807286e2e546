"""The paged KV cache's bookkeeping: fixed-size blocks, reference counts, prefix caching.

A block is free (no sequence holds it) or held (reference count > 0). A full block whose
tokens are known is registered under a hash chained over every token up to its end, so a
later prompt with the same prefix reuses it instead of recomputing. A free registered block
stays reusable (evictable, least recently freed first) until a fresh allocation takes it.
Only whole blocks are shared, and a hit never covers a prompt's last token, so no shared
block is ever written again.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from collections.abc import Sequence

__all__ = ["BlockManager", "chain_hash"]


def chain_hash(parent: bytes, tokens: Sequence[int]) -> bytes:
    """The hash of a full block: its parent's hash and its own tokens."""
    digest = hashlib.blake2b(parent, digest_size=16)
    digest.update(b",".join(str(t).encode() for t in tokens))
    return digest.digest()


class BlockManager:
    """Allocates and frees KV blocks; finds cached prefix blocks when `prefix_caching`."""

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self._fresh: deque[int] = deque(range(num_blocks))
        self._evictable: OrderedDict[int, None] = OrderedDict()
        self._refs = [0] * num_blocks
        self._hash_of: list[bytes | None] = [None] * num_blocks
        self._cached: dict[bytes, int] = {}
        self.hits = self.queries = 0  # prefix-cache tokens found / looked up (vLLM's counts)

    @property
    def num_free(self) -> int:
        """Blocks no sequence holds (fresh or evictable)."""
        return len(self._fresh) + len(self._evictable)

    @property
    def usage(self) -> float:
        """Fraction of blocks held by sequences, 0..1."""
        return 1.0 - self.num_free / self.num_blocks

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold `tokens` tokens."""
        return -(-tokens // self.block_size)

    def probe(self, tokens: Sequence[int]) -> tuple[list[int], list[bytes]]:
        """Cached blocks (and their hashes) for the longest full-block prefix of `tokens`,
        leaving the last token out; takes nothing."""
        if not self.prefix_caching:
            return [], []
        blocks: list[int] = []
        hashes: list[bytes] = []
        parent = b""
        size = self.block_size
        for start in range(0, (len(tokens) - 1) // size * size, size):
            parent = chain_hash(parent, tokens[start:start + size])
            block = self._cached.get(parent)
            if block is None:
                break
            blocks.append(block)
            hashes.append(parent)
        return blocks, hashes

    def can_take(self, hits: Sequence[int], fresh: int) -> bool:
        """Whether `fresh` new blocks can be allocated once the cached `hits` are held."""
        evicted = sum(1 for block in hits if self._refs[block] == 0)
        return self.num_free - evicted >= fresh

    def take(self, hits: Sequence[int], fresh: int) -> list[int]:
        """Hold the cached `hits`, then allocate `fresh` blocks; the hits come first."""
        for block in hits:
            if self._refs[block] == 0:
                del self._evictable[block]
            self._refs[block] += 1
        return [*hits, *(self._allocate() for _ in range(fresh))]

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference to each block; one no sequence holds becomes free."""
        for block in blocks:
            self._refs[block] -= 1
            if self._refs[block] == 0:
                if self._hash_of[block] is not None:
                    self._evictable[block] = None
                else:
                    self._fresh.append(block)

    def register(self, block: int, block_hash: bytes) -> None:
        """Record a full block's hash so later prefixes find it (first block per hash wins)."""
        if self.prefix_caching and block_hash not in self._cached \
                and self._hash_of[block] is None:
            self._cached[block_hash] = block
            self._hash_of[block] = block_hash

    def count_lookup(self, looked: int, found: int) -> None:
        """Account one request's prefix-cache lookup in tokens, as vLLM counts it: `looked`
        is the prompt's length, `found` the tokens served from the cache."""
        self.queries += looked
        self.hits += found

    def _allocate(self) -> int:
        if self._fresh:
            block = self._fresh.popleft()
        else:
            block, _ = self._evictable.popitem(last=False)
            old = self._hash_of[block]
            assert old is not None
            del self._cached[old]
            self._hash_of[block] = None
        self._refs[block] = 1
        return block
