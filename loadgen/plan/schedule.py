"""The queries of a run: pure functions of (plan, seeds) -> issue offsets and samples.

The arrival processes live in `arrivals.py`, the plan that picks one in
`plan.py`; here they are walked in chunks
(`open_loop_offsets`), paired with each query's samples (`plan_queries`),
split between load processes (`share_queries`), and described or
saved with the run so that it can be replayed exactly (`describe_schedule`,
`save_schedule`).

The split: each load process generates only its own share where it can, so its
planning costs what its share holds, not N times that (walking the whole schedule
to keep one query in N made each process's cost per query grow with the process
count). A Poisson schedule (steps and bursts too: Poisson of a time-varying rate)
splits into independent Poisson streams of rate / N, one per process, each seeded
from the schedule seed and the process's index: by the superposition theorem their
union is Poisson at the full rate, with exactly the statistics of seeded thinning
(a thinned share is Poisson of rate / N and independent of the others too). A
constant rate splits by position: process i computes arrivals i, i + N, i + 2N, ...
Each share stops by the run's rules with its part of the query counts (minimums and
maximums divided exactly among the processes). Its samples come from its own
seeded stream (equal issue holds within each share) and its ids are k N + i (for a
constant rate, the query's position).
Where a per-process stream would change the statistics, every process keeps
walking the whole plan and keeps its seeded-thinning share (`thin`): a gamma
(bursty) renewal process (a random share of it is not gamma, and N independent
gamma streams are not one), a trace or saved schedule (partitioned exactly: every
recorded arrival once), and prompts read in order (query i asks row i). One
process's schedule is the plan itself, unchanged.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.errors import SettingsError
from loadgen.plan.arrivals import (
    ArrivalProcess,
    Burst,
    Constant,
    ConstantShare,
    Poisson,
    Steps,
    Trace,
)
from loadgen.plan.plan import RunPlan, describe_process
from loadgen.plan.qsl import accuracy_queries, permuted_chunks, sample_chunks
from loadgen.plan.settings import IssueMode, TestSettings, parse_overrides, settings_from_mapping
from loadgen.plan.tracefile import SCHEDULE_FILE
from loadgen.plan.version import VERSION

__all__ = [
    "CHUNK",
    "Plan",
    "describe_schedule",
    "open_loop_offsets",
    "plan_queries",
    "replay_settings",
    "save_schedule",
    "schedule_offsets",
    "share_process",
    "share_queries",
    "share_size",
    "split_kind",
    "thin",
]

CHUNK = 1024  # queries planned at a time: small, so building one (~30 us) never stalls issuing
_NS = 1e9

Plan = tuple[Iterator[np.ndarray] | None, Iterator[Any]]
"""(offset chunks or None, sample-row chunks): what the engine walks."""


def open_loop_offsets(plan: RunPlan, chunk: int = CHUNK) -> Iterator[np.ndarray]:
    """Chunks of int64 ns offsets covering warm-up plus the measured window.

    Issuing stops at the first arrival that satisfies both minimums (measured
    duration and measured query count), or earlier at either maximum. A trace
    (or saved schedule) is replayed whole, up to the maximums.
    """
    process = plan.arrival
    assert process is not None, "only an open-loop plan has a schedule"
    rng = np.random.default_rng(plan.settings.schedule_rng_seed)
    return _walk(plan, process, rng, plan.min_query_count, plan.max_query_count or None, chunk)


def _walk(plan: RunPlan, process: ArrivalProcess, rng: np.random.Generator, min_count: int,
          max_count: int | None, chunk: int) -> Iterator[np.ndarray]:
    """`open_loop_offsets` for any process and query counts (None: no maximum)."""
    whole = isinstance(process, Trace)
    warmup_ns = plan.warmup_ns
    min_end_ns = np.inf if whole else warmup_ns + plan.min_duration_ns
    max_end_ns = warmup_ns + plan.max_duration_ns if plan.max_duration_ns else np.inf
    cap = np.iinfo(np.int64).max if max_count is None else max_count
    measured = planned = 0
    after = 0.0
    while True:
        offsets = process.next_offsets(rng, after, chunk, planned)
        if offsets.size == 0:
            return
        planned += offsets.size
        after = float(offsets[-1])
        in_window = offsets >= warmup_ns
        counts = measured + np.cumsum(in_window)
        enough = (offsets >= min_end_ns) & (counts >= min_count)
        capped = (offsets > max_end_ns) | (counts > cap)
        stop_at = _first(enough, inclusive=True, other=_first(capped, inclusive=False))
        if stop_at is not None:
            yield np.round(offsets[:stop_at]).astype(np.int64)
            return
        measured = int(counts[-1])
        yield np.round(offsets).astype(np.int64)
        if offsets.size < chunk:
            return


def _first(mask: np.ndarray, inclusive: bool, other: int | None = None) -> int | None:
    """Length of the prefix ending at the first True in `mask` (or `other`, if earlier)."""
    hits = np.flatnonzero(mask)
    here = None if hits.size == 0 else int(hits[0]) + (1 if inclusive else 0)
    candidates = [c for c in (here, other) if c is not None]
    return min(candidates) if candidates else None


def plan_queries(plan: RunPlan) -> Plan:
    """(offset chunks, or None when queries do not go out on a schedule; sample chunks)."""
    s = plan.settings
    if plan.issue_mode is IssueMode.ACCURACY:
        return None, iter([accuracy_queries(plan.library, plan.samples_per_query)])
    draw = _draw(plan)
    if plan.issue_mode is IssueMode.OFFLINE:
        return None, draw(plan.library, plan.offline_sample_count, s.sample_index_rng_seed, 1)
    samples = draw(plan.library, plan.samples_per_query, s.sample_index_rng_seed, CHUNK)
    if _in_order_prompts(plan):  # a trace's lengths: query i asks row i
        samples = _in_order(plan.samples_per_query)
    if plan.issue_mode is IssueMode.CLOSED:
        return None, samples
    return open_loop_offsets(plan), samples


Draw = Callable[..., Iterator[np.ndarray]]


def _draw(plan: RunPlan) -> Draw:
    """How the plan draws each query's samples: equal issue (permutations) or uniform."""
    return permuted_chunks if plan.settings.equal_issue else sample_chunks


def _in_order_prompts(plan: RunPlan) -> bool:
    return bool(getattr(plan.prompts, "in_order", False))


def _in_order(samples_per_query: int) -> Iterator[np.ndarray]:
    """Sample rows 0, 1, 2, ... in chunks of CHUNK queries (query i gets sample i)."""
    start = 0
    while True:
        count = CHUNK * samples_per_query
        yield np.arange(start, start + count, dtype=np.int64).reshape(CHUNK, samples_per_query)
        start += count


THIN_STREAM = 0x7417  # mixed with the schedule seed: the thinning draws' own stream


def thin(plan: Plan, seed: int, index: int, count: int) -> tuple[Plan, Iterator[int]]:
    """Load process `index` of `count`: its seeded-thinning share of the plan, and ids.

    Each query goes to one process by a seeded uniform draw, the same in every
    process (it walks the same global plan with the same seed), so the shares
    partition the plan exactly; a thinned share of a Poisson process is itself
    Poisson (rate / count) and independent of the others, so a small start
    offset between hosts leaves their union Poisson. The ids are the queries'
    positions in the whole plan, so every process numbers its queries apart.
    """
    offsets, samples = plan
    assert offsets is not None, "only an open-loop plan is split"
    rng = np.random.default_rng([seed, THIN_STREAM])
    rows: collections.deque[np.ndarray] = collections.deque()
    ids: collections.deque[np.ndarray] = collections.deque()

    def mine() -> Iterator[np.ndarray]:
        start = 0
        for chunk in offsets:
            keep = np.flatnonzero(rng.integers(0, count, chunk.size) == index)
            rows.append(next(samples)[keep])
            ids.append(keep + start)
            start += chunk.size
            yield chunk[keep]

    def my_rows() -> Iterator[np.ndarray]:
        while True:  # the runner takes a chunk of offsets, then its rows
            yield rows.popleft()

    def my_ids() -> Iterator[int]:
        while True:  # and issues the chunk's queries after planning it
            yield from ids.popleft().tolist()

    return (mine(), my_rows()), my_ids()


SHARE_STREAM = 0x5A4E  # mixed with the seeds and a process's index: its own streams


def share_process(process: ArrivalProcess, index: int, count: int) -> ArrivalProcess | None:
    """Load process `index` of `count`'s own arrival process, or None where only walking
    the whole plan keeps the statistics (gamma, a trace). See the module's docstring."""
    if isinstance(process, Poisson):
        return Poisson(process.rate_qps / count)
    if isinstance(process, Steps):
        return dataclasses.replace(process, rates_qps=tuple(r / count for r in process.rates_qps))
    if isinstance(process, Burst):
        return dataclasses.replace(process, rate_qps=process.rate_qps / count)
    if isinstance(process, Constant):
        return ConstantShare(process.rate_qps, index, count)
    return None


def _own_process(plan: RunPlan, index: int, count: int) -> ArrivalProcess | None:
    """The share's own process when the plan splits into per-process streams."""
    if count == 1 or plan.arrival is None or _in_order_prompts(plan):
        return None
    return share_process(plan.arrival, index, count)


def _part(total: int, index: int, count: int) -> int:
    """Process `index`'s part of `total` (the parts add up to it exactly)."""
    return total // count + (1 if index < total % count else 0)


def share_queries(plan: RunPlan, index: int, count: int) -> tuple[Plan, Iterator[int] | None]:
    """Load process `index` of `count`: its share of an open-loop plan, and its query ids
    (None: the plan's own numbering, for one process). Generated on its own where the
    arrivals allow, else thinned from the whole plan (the module's docstring says which)."""
    if count == 1:
        return plan_queries(plan), None
    process = _own_process(plan, index, count)
    if process is None:
        return thin(plan_queries(plan), plan.settings.schedule_rng_seed, index, count)
    s = plan.settings
    rng = np.random.default_rng([s.schedule_rng_seed, SHARE_STREAM, index])
    max_count = _part(plan.max_query_count, index, count) if plan.max_query_count else None
    offsets = _walk(plan, process, rng, _part(plan.min_query_count, index, count), max_count,
                    CHUNK)
    samples = _draw(plan)(plan.library, plan.samples_per_query,
                          [s.sample_index_rng_seed, SHARE_STREAM, index], CHUNK)
    return (offsets, samples), itertools.count(index, count)


def share_size(plan: RunPlan, index: int, count: int) -> int:
    """How many queries load process `index` of `count` is to issue (its share)."""
    (offsets, _), _ = share_queries(plan, index, count)
    assert offsets is not None
    return sum(chunk.size for chunk in offsets)


def split_kind(plan: RunPlan) -> str:
    """How the plan is split between `settings.workers` load processes, in words."""
    process = _own_process(plan, 0, max(plan.settings.workers, 2))
    if isinstance(process, ConstantShare):
        return "by position (every N-th arrival)"
    if process is not None:
        return "independent Poisson streams of rate / N"
    return "seeded thinning of the global schedule"


def schedule_offsets(plan: RunPlan) -> Iterator[np.ndarray]:
    """The run's whole schedule in order: the plan's, or the union of the load processes'
    own shares where each generated its own."""
    count = plan.settings.workers
    if _own_process(plan, 0, count) is None:
        return open_loop_offsets(plan)
    shares = []
    for index in range(count):
        (offsets, _), _ = share_queries(plan, index, count)
        assert offsets is not None
        shares.append(offsets)
    return _merged(shares)


def _merged(streams: Iterable[Iterator[np.ndarray]]) -> Iterator[np.ndarray]:
    """Ascending chunks merged into ascending chunks, a bounded window at a time: each
    round emits what no stream still running can go below."""
    live = list(streams)
    held = [np.empty(0, dtype=np.int64) for _ in live]
    running = [True] * len(live)
    while True:
        for i, stream in enumerate(live):
            while running[i] and held[i].size == 0:
                chunk = next(stream, None)
                if chunk is None:
                    running[i] = False
                else:
                    held[i] = chunk
        if not any(h.size for h in held):
            return
        bound = min((int(h[-1]) for h, on in zip(held, running, strict=True) if on),
                    default=None)
        cut = [h.size if bound is None else int(np.searchsorted(h, bound, side="right"))
               for h in held]
        yield np.sort(np.concatenate([h[:c] for h, c in zip(held, cut, strict=True)]))
        held = [h[c:] for h, c in zip(held, cut, strict=True)]


def describe_schedule(plan: RunPlan) -> dict[str, Any]:
    """What regenerates the schedule bit for bit: process, seed and versions."""
    if plan.arrival is None:
        return {"arrival": "closed" if plan.issue_mode is IssueMode.CLOSED else "none"}
    split = {"split": split_kind(plan)} if plan.settings.workers > 1 else {}
    return {"arrival": plan.settings.arrival, "process": describe_process(plan.arrival),
            "seed": plan.settings.schedule_rng_seed, **split,
            "loadgen_version": VERSION, "numpy_version": np.__version__}


def save_schedule(plan: RunPlan, out_dir: Path) -> dict[str, Any]:
    """Write the whole planned schedule to out_dir/schedule.bin (int64 ns, little-endian):
    with load processes that each generated their own share, the union of the shares.

    Regenerated from the plan after the run, so planning costs the run
    nothing; returns the file's name, query count and sha256.
    """
    digest = hashlib.sha256()
    queries = 0
    with open(out_dir / SCHEDULE_FILE, "wb") as out:
        for chunk in schedule_offsets(plan):
            data = chunk.astype("<i8").tobytes()
            digest.update(data)
            out.write(data)
            queries += chunk.size
    return {"file": SCHEDULE_FILE, "queries": queries, "sha256": digest.hexdigest()}


def replay_settings(run_dir: Path, overrides: list[str] | None = None) -> TestSettings:
    """A run's own settings, replaying its saved schedule.bin bit for bit (then `--set`s).

    The file must match the sha256 that run's result.json recorded.
    """
    def fail(why: str) -> SettingsError:
        return SettingsError([f"--replay {run_dir}: {why}"])

    try:
        doc = json.loads((run_dir / "result.json").read_text())
        values, recorded = dict(doc["settings"]), doc["schedule"].get("sha256")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise fail(f"not a run directory with a result.json ({exc})") from None
    path = run_dir / SCHEDULE_FILE
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        raise fail(f"no {SCHEDULE_FILE} (closed-loop runs have none)") from None
    if digest != recorded:
        raise fail(f"{SCHEDULE_FILE} does not match the sha256 in result.json")
    values.pop("compliant", None)
    values["schedule_file"] = str(path)
    return settings_from_mapping(values | parse_overrides(overrides or []))
