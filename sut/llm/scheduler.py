"""Decide each step's work: which sequences run, how many tokens each, who is preempted.

    continuous   every step: running sequences first (a decode is one token, a prefill
                 continues in chunks), then waiting ones are admitted while seats
                 (`max_num_seqs`), the token budget (`max_num_batched_tokens`) and free
                 KV blocks allow; a finished sequence leaves at once
    static       request-level batching: admits only when nothing runs, then runs that
                 batch until every member has finished

Order is the policy's: `fcfs` by arrival, `priority` by (priority, arrival). When a running
sequence needs a block and none is free, the last running sequence in policy order is
preempted by recompute (its blocks freed, back to the waiting queue, its tokens recomputed
on readmission). Without chunked prefill a prompt is admitted only whole within the budget.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from sut.llm.blocks import BlockManager
from sut.llm.config import EngineConfig
from sut.llm.sequence import Sequence

__all__ = ["Scheduler", "StepPlan"]


@dataclass(slots=True)
class StepPlan:
    """One step's work: (sequence, new tokens) in batch order, and who was preempted."""

    work: list[tuple[Sequence, int]] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    admitted: int = 0


class Scheduler:
    """The waiting queue, the running set, and the rule that forms each step."""

    def __init__(self, config: EngineConfig, blocks: BlockManager) -> None:
        self.config = config
        self.blocks = blocks
        self.waiting: list[Sequence] = []  # kept in policy order
        self.running: list[Sequence] = []  # kept in policy order
        self._priority = config.scheduling_policy == "priority"

    def _key(self, seq: Sequence) -> tuple[int, int, int]:
        return (seq.priority if self._priority else 0, seq.arrival_ns, seq.request_id)

    def add(self, seq: Sequence) -> None:
        """Queue a new (or preempted) sequence in policy order."""
        self._insert(self.waiting, seq)

    def _insert(self, queue: list[Sequence], seq: Sequence) -> None:
        keys = [self._key(s) for s in queue]
        queue.insert(bisect.bisect(keys, self._key(seq)), seq)

    def remove(self, seq: Sequence) -> None:
        """Take a sequence out (finished or cancelled) and free its blocks."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.blocks.release(seq.blocks)
        seq.blocks = []

    def schedule(self) -> StepPlan:
        """Form the next step."""
        plan = StepPlan()
        budget = self.config.max_num_batched_tokens
        chunked = self.config.enable_chunked_prefill
        for seq in list(self.running):
            if budget == 0 or (plan.preempted and seq in plan.preempted):
                continue  # preempted as a victim earlier in this loop
            want = seq.num_tokens - seq.computed
            if want > budget and not chunked:
                continue
            tokens = min(want, budget)
            if not self._grow(seq, tokens, plan):
                continue
            plan.work.append((seq, tokens))
            budget -= tokens
        if plan.preempted or (self.config.scheduler == "static" and self.running):
            return plan
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            tokens = self._admit(self.waiting[0], budget, chunked)
            if tokens == 0:
                break
            seq = self.waiting.pop(0)
            self._insert(self.running, seq)
            plan.work.append((seq, tokens))
            plan.admitted += 1
            budget -= tokens
        return plan

    def _grow(self, seq: Sequence, tokens: int, plan: StepPlan) -> bool:
        """Give `seq` blocks for `tokens` more, preempting from the tail; False if it was the
        one preempted."""
        need = self.blocks.blocks_for(seq.computed + tokens) - len(seq.blocks)
        while need > self.blocks.num_free:
            victim = self.running[-1]
            self._preempt(victim, plan)
            if victim is seq:
                return False
        seq.blocks.extend(self.blocks.take((), max(0, need)))
        return True

    def _preempt(self, seq: Sequence, plan: StepPlan) -> None:
        self.running.remove(seq)
        self.blocks.release(seq.blocks)
        seq.blocks, seq.block_hashes = [], []
        seq.computed = 0
        seq.preemptions += 1
        plan.preempted.append(seq)
        self.add(seq)

    def _admit(self, seq: Sequence, budget: int, chunked: bool) -> int:
        """Blocks and the first chunk for a waiting sequence; 0 when it cannot start now."""
        tokens = seq.token_at(0, seq.num_tokens)
        hits, hashes = self.blocks.probe(tokens)
        cached = len(hits) * self.blocks.block_size
        want = seq.num_tokens - cached
        if want > budget and not chunked:
            return 0
        count = min(want, budget)
        fresh = self.blocks.blocks_for(cached + count) - len(hits)
        if not self.blocks.can_take(hits, fresh):
            return 0
        seq.blocks = self.blocks.take(hits, fresh)
        seq.block_hashes = list(hashes)
        seq.computed = cached
        if seq.preemptions == 0:  # a re-admission is not a new query (vLLM counts it apart)
            seq.cached_tokens = cached
            self.blocks.count_lookup(seq.num_tokens, cached)
        return count
