"""HDR latency recording: bulk numpy recording, exact merge, V2 encode/decode, gains.

Histograms are plain `hdrh.histogram.HdrHistogram` objects (the `hdrhistogram`
package), so every method of that package keeps working on them. What this
module adds is speed and strictness:

- `record_array` records a whole int64 array at once. It computes the counts
  index exactly as the package's `_counts_index_for` does, `np.bincount`s the
  indices and adds them into a numpy view of the package's ctypes counts array,
  then updates `total_count`, `min_value` and `max_value` as per-value
  `record_value` calls would. Percentiles, mean, `encode` and `add` then give
  exactly what `record_value` would have given.
- A value below 0 or above the histogram's highest trackable value is not
  recorded; it is counted and the count returned. (The package drops such a
  value with only a False return, and records values a little above the
  highest trackable one.)
- `Recorder` is the hot path: `add` stores one int in a preallocated buffer.
  `flush_some` moves the newest `FLUSH_SLICE` buffered values into the
  histogram (counts do not care about order, so nothing is moved about); the
  engine calls it in the slack before issue times (`Collector.tidy`), and
  `add` calls it itself only when the buffer is full. Each step is small (a
  few tens of us), so recording never stalls issuing for long.
- Percentiles and the mean are computed from the counts with numpy; the
  package walks its 33,792 counters in Python for each query (10-100 ms).
- `merge` avoids the package's `add`, which sets the minimum to 0 whenever
  the histogram added is empty; `decode` turns every malformed blob into a
  `ResultError` and refuses blobs that would decompress or allocate past a
  sane size before the package sees them.
- A load worker's report carries each histogram's `gain` since the last (`gain_blob`:
  the raw counts over the occupied buckets, one subtraction). A V2 blob compresses all
  33,792 counters (about 0.4 ms a histogram), so a report of 6-13 histograms held the
  issue loop 5-7 ms every 2 s. `decode` reads both; result.json keeps V2 (what other
  HDR implementations read).
"""

from __future__ import annotations

import array
import base64
import math
import struct
import sys
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from hdrh import codec  # type: ignore[import-untyped]
from hdrh.histogram import HdrHistogram, get_bucket_count  # type: ignore[import-untyped]

from loadgen.errors import ResultError

__all__ = [
    "BUFFER_CAPACITY",
    "FLUSH_SLICE",
    "HIGHEST_NS",
    "Gain",
    "LOWEST_NS",
    "SIGNIFICANT_DIGITS",
    "Recorder",
    "add_into",
    "counts_copy",
    "decode",
    "encode",
    "gain",
    "gain_blob",
    "merge",
    "new_histogram",
    "percentile_ns",
    "percentiles_ns",
    "record_array",
    "summary_ns",
    "written",
]

LOWEST_NS = 1
HIGHEST_NS = 3_600_000_000_000  # one hour
SIGNIFICANT_DIGITS = 3
BUFFER_CAPACITY = 16_384  # values buffered at most (128 KB): memory stays bounded
FLUSH_SLICE = 1_024  # values recorded per `flush_some` step: ~20-40 us, a blip, not a stall

_SUMMARY_PERCENTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}
_FLOAT_EXACT_LIMIT = 1 << 53  # ints below this convert to float64 exactly
_EXT_HEADER = struct.Struct(">II")  # cookie, compressed length
_PAYLOAD_HEADER = struct.Struct(">IIIIQQd")  # see hdrh.codec.PayloadHeader
_MAX_COUNTERS = 1 << 21  # a blob may hold at most this many counters
_DECODE_ERRORS = (  # everything the package and our checks raise on a bad blob
    ValueError,  # includes binascii.Error
    TypeError,
    IndexError,
    OverflowError,
    RuntimeError,
    struct.error,
    zlib.error,
    codec.HdrCookieException,
    codec.HdrLengthException,
    codec.HdrHistogramSettingsException,
)


def new_histogram() -> HdrHistogram:
    """An empty histogram for 1 ns .. 1 h at 3 significant digits."""
    return HdrHistogram(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS)


def _counts(hist: HdrHistogram) -> npt.NDArray[np.unsignedinteger]:
    """A writable numpy view (no copy) of the histogram's ctypes counts array."""
    return np.ctypeslib.as_array(hist.counts)


def _counts_index(hist: HdrHistogram, values: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """`hist._counts_index_for` for every value (0 <= value < 2**53)."""
    # bit length of (value | mask), read off the float64 exponent: exact below 2**53
    as_float = (values | hist.sub_bucket_mask).astype(np.float64)
    bucket: npt.NDArray[np.int64] = as_float.view(np.int64)
    bucket >>= 52
    bucket -= 1022 + hist.unit_magnitude + hist.sub_bucket_half_count_magnitude + 1
    sub_bucket = values >> (bucket + hist.unit_magnitude)
    bucket += 1
    bucket <<= hist.sub_bucket_half_count_magnitude
    bucket += sub_bucket
    bucket -= hist.sub_bucket_half_count
    return bucket


def _add_counts(hist: HdrHistogram, index: npt.NDArray[np.int64]) -> None:
    binned = np.bincount(index)
    view = _counts(hist)
    view[: binned.size] += binned.astype(view.dtype, copy=False)


def record_array(hist: HdrHistogram, values: npt.ArrayLike) -> int:
    """Record every in-range value of an integer array; return how many were out of range.

    In range means 0 <= value <= hist.highest_trackable_value. Values out of
    range are not recorded: the caller must count them (never drop them).
    """
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"record_array needs integer values, got {arr.dtype}")
    if hist.highest_trackable_value >= _FLOAT_EXACT_LIMIT:
        raise ValueError("record_array supports highest_trackable_value < 2**53")
    arr = arr.ravel()
    if arr.size == 0:
        return 0
    highest: int = hist.highest_trackable_value
    out_of_range = 0
    low, high = int(arr.min()), int(arr.max())
    if low < 0 or high > highest:
        keep = (arr >= 0) & (arr <= highest)
        arr = arr[keep]
        out_of_range = keep.size - arr.size
        if arr.size == 0:
            return out_of_range
        low, high = int(arr.min()), int(arr.max())
    _add_counts(hist, _counts_index(hist, arr.astype(np.int64, copy=False)))
    hist.total_count += int(arr.size)
    hist.min_value = min(hist.min_value, low)
    hist.max_value = max(hist.max_value, high)
    return out_of_range


class Recorder:
    """One histogram fed through a bounded buffer; `add` is the hot call.

    Memory is bounded: the buffer holds at most `BUFFER_CAPACITY` values.
    Out-of-range values (negative, above `HIGHEST_NS`, or not even an int64)
    are counted in `out_of_range`.
    """

    __slots__ = ("_buf", "_hist", "_n", "_out_of_range", "_values")

    def __init__(self) -> None:
        self._hist = new_histogram()
        self._buf = array.array("q", bytes(8 * BUFFER_CAPACITY))
        self._values = np.frombuffer(self._buf, dtype=np.int64)
        self._n = 0
        self._out_of_range = 0

    def add(self, value: int) -> None:
        """Buffer one latency in ns; a full buffer records a slice of itself."""
        n = self._n
        try:
            self._buf[n] = value
        except OverflowError:
            self._out_of_range += 1
            return
        n += 1
        self._n = n
        if n == BUFFER_CAPACITY:
            self.flush_some()

    def extend(self, values: Sequence[int]) -> None:
        """Buffer many latencies in ns at once (one copy, not one call per value)."""
        k = len(values)
        if not k:
            return
        if k > FLUSH_SLICE:  # too many to buffer: recorded at once
            self.add_array(np.asarray(values, dtype=np.int64))
            return
        while k >= BUFFER_CAPACITY - self._n:  # room a slice at a time (and one left for `add`)
            self.flush_some()
        try:
            block = array.array("q", values)
        except OverflowError:  # a value beyond int64: one at a time, each counted
            for value in values:
                self.add(value)
            return
        n = self._n
        self._buf[n:n + k] = block
        self._n = n + k

    def add_array(self, values: npt.ArrayLike) -> None:
        """Record a whole integer array of latencies in ns."""
        self._out_of_range += record_array(self._hist, values)

    def flush_some(self) -> None:
        """Record the newest `FLUSH_SLICE` buffered values (or all, if fewer)."""
        n = self._n
        start = max(n - FLUSH_SLICE, 0)
        self._record(start, n)
        self._n = start

    def flush(self) -> None:
        """Record every buffered value."""
        self._record(0, self._n)
        self._n = 0

    def _record(self, start: int, stop: int) -> None:
        if stop > start:
            self._out_of_range += record_array(self._hist, self._values[start:stop])

    @property
    def pending(self) -> int:
        """Values buffered and not yet in the histogram (never above BUFFER_CAPACITY)."""
        return self._n

    @property
    def histogram(self) -> HdrHistogram:
        """The histogram, with the buffer flushed into it first."""
        self.flush()
        return self._hist

    @property
    def pending_values(self) -> npt.NDArray[np.int64]:
        """A copy of the values buffered and not yet in the histogram (a cheap live glance)."""
        return self._values[:self._n].copy()

    @property
    def recorded_histogram(self) -> HdrHistogram:
        """The histogram as recorded so far, buffer left alone (a cheap live glance)."""
        return self._hist

    @property
    def recorded_out_of_range(self) -> int:
        """Values refused as out of range so far, buffer left alone."""
        return self._out_of_range

    @property
    def count(self) -> int:
        """Values recorded (after a flush)."""
        self.flush()
        return int(self._hist.total_count)

    @property
    def out_of_range(self) -> int:
        """Values refused as out of range (after a flush)."""
        self.flush()
        return self._out_of_range


def _values_at_percentiles(hist: HdrHistogram, percentiles: Iterable[float]) -> list[int]:
    """What `hist.get_value_at_percentile(p)` returns for each p, from one cumsum."""
    ps = list(percentiles)
    for p in ps:
        if not 0.0 <= p <= 100.0:
            raise ValueError(f"percentile must be in [0, 100], got {p}")
    total = int(hist.total_count)
    if total == 0:
        return [0] * len(ps)
    cumulative = np.cumsum(_counts(hist), dtype=np.uint64)
    out = []
    for p in ps:
        target = max(int(p * total / 100 + 0.5), 1)  # the package's rounding
        # a numpy scalar: against a Python int numpy converts the whole array (~10x slower)
        index = int(np.searchsorted(cumulative, np.uint64(target), side="left"))
        if index >= cumulative.size:
            out.append(0)
            continue
        value = hist.get_value_from_index(index)
        if p:
            out.append(int(hist.get_highest_equivalent_value(value)))
        else:
            out.append(int(hist.get_lowest_equivalent_value(value)))
    return out


def percentile_ns(hist: HdrHistogram, p: float) -> int:
    """The value at percentile p in [0, 100], as `get_value_at_percentile` gives it."""
    return _values_at_percentiles(hist, [p])[0]


def percentiles_ns(hist: HdrHistogram, ps: Sequence[float]) -> list[int]:
    """`percentile_ns` for each of `ps`, from one pass over the counts."""
    return _values_at_percentiles(hist, ps)


def _bucket_bounds(
    hist: HdrHistogram, index: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Per counts index: its lowest value (`get_value_from_index`) and log2 of its width."""
    bucket = (index >> hist.sub_bucket_half_count_magnitude) - 1
    sub_bucket = (index & (hist.sub_bucket_half_count - 1)) + hist.sub_bucket_half_count
    first = bucket < 0
    sub_bucket[first] -= hist.sub_bucket_half_count
    bucket[first] = 0
    shift = bucket + hist.unit_magnitude
    return sub_bucket << shift, shift


def _mean(hist: HdrHistogram) -> float:
    """`hist.get_mean_value()`, computed from the nonzero counts with numpy."""
    counts = _counts(hist)
    index = np.flatnonzero(counts)
    total: int = hist.total_count
    if total == 0 or index.size == 0:
        return 0.0
    lowest, shift = _bucket_bounds(hist, index)
    median = lowest + ((np.int64(1) << shift) >> 1)  # the package's median-equivalent value
    # exact integer sum: count * value can pass 2**64 over a long run
    weighted = sum(c * m for c, m in zip(counts[index].tolist(), median.tolist(), strict=True))
    return float(weighted) / total


def summary_ns(hist: HdrHistogram) -> dict[str, int]:
    """p50 p90 p95 p99 p999 mean min max count, as ints in ns; all zeros when empty."""
    count = int(hist.total_count)
    if count == 0:
        return dict.fromkeys([*_SUMMARY_PERCENTILES, "mean", "min", "max", "count"], 0)
    values = _values_at_percentiles(hist, _SUMMARY_PERCENTILES.values())
    out = dict(zip(_SUMMARY_PERCENTILES, values, strict=True))
    out["mean"] = round(_mean(hist))
    out["min"] = int(hist.get_min_value())
    out["max"] = int(hist.get_max_value())
    out["count"] = count
    return out


def _add_into(dst: HdrHistogram, src: HdrHistogram) -> None:
    if src.total_count == 0:
        return
    src_counts = _counts(src)
    same_layout = (
        src.unit_magnitude == dst.unit_magnitude
        and src.sub_bucket_half_count_magnitude == dst.sub_bucket_half_count_magnitude
        and src.counts_len <= dst.counts_len
    )
    if same_layout:  # same index -> same bucket: add the arrays
        dst_counts = _counts(dst)
        dst_counts[: src_counts.size] += src_counts.astype(dst_counts.dtype, copy=False)
        low, high = int(src.min_value), int(src.max_value)
    else:  # re-record each nonzero bucket at its lowest value, like the package's `add`
        index = np.flatnonzero(src_counts)
        values, _ = _bucket_bounds(src, index)
        if int(values.max()) > dst.highest_trackable_value:
            raise ValueError("a histogram holds values beyond the merge target's range")
        np.add.at(_counts(dst), _counts_index(dst, values), src_counts[index])
        low, high = int(values.min()), int(values.max())
    dst.total_count += int(src.total_count)
    dst.min_value = min(dst.min_value, low)
    dst.max_value = max(dst.max_value, high)


def add_into(dst: HdrHistogram, src: HdrHistogram) -> None:
    """Add `src`'s counts into `dst`, in place (exact when the layouts match, as `merge`)."""
    _add_into(dst, src)


def counts_copy(hist: HdrHistogram) -> npt.NDArray[np.unsignedinteger]:
    """A copy of the counts, to take a `gain` against later."""
    return _counts(hist).copy()


def _occupied(hist: HdrHistogram) -> tuple[int, int]:
    """The counts slice [lo, hi) that can hold counts: from its minimum's bucket to its
    maximum's (the whole array when they are not plain values)."""
    size = int(hist.counts_len)
    low, high = int(hist.min_value), int(hist.max_value)
    if not 0 <= low <= high < _FLOAT_EXACT_LIMIT:
        return 0, size
    lo, hi = _counts_index(hist, np.array([low, high], dtype=np.int64)).tolist()
    return max(int(lo), 0), min(int(hi) + 1, size)


def merge(hists: Iterable[HdrHistogram]) -> HdrHistogram:
    """One new histogram (`new_histogram` layout) holding the counts of all of them.

    Exact when the layouts match (`new_histogram`, or any histogram with the
    same unit and sub-bucket count and no larger range); otherwise each bucket
    is re-recorded at its lowest value, as the package's `add` does.
    """
    out = new_histogram()
    for hist in hists:
        _add_into(out, hist)
    return out


def encode(hist: HdrHistogram) -> str:
    """The standard V2 compressed, base64 form (what other HDR implementations read)."""
    blob: bytes = hist.encode()
    return blob.decode("ascii")


HistText = Callable[[HdrHistogram], "str | bytes"]
"""How a histogram is written: `encode` (V2 text, for files) or `gain_blob` (a `Gain`,
in a load worker's report)."""



def written(hist: HdrHistogram, text: HistText = encode) -> str | bytes | None:
    """`hist` (or a `Gain`) written by `text`, V2 base64 by default; None when it holds no
    value (how every tally writes an empty histogram)."""
    return text(hist) if hist.total_count else None


_GAIN_HEADER = struct.Struct("<8sQQIQB")  # magic, lowest, highest, digits, lo, word size
_GAIN_MAGIC = b"hdrgain1"


@dataclass(frozen=True, slots=True)
class Gain:
    """What a histogram gained since a snapshot of its counts: the raw counts from its
    lowest to its highest bucket that gained. Made on a load worker's issue loop with a
    subtraction and a scan over the occupied buckets (no zlib, no new histogram: a V2 blob
    of each histogram held that loop 5-7 ms a report); `gain_blob` writes it, `decode`
    reads it back as a histogram.
    It stands in for a histogram only where a report is encoded (`total_count`)."""

    lowest_trackable_value: int
    highest_trackable_value: int
    significant_figures: int
    lo: int
    counts: npt.NDArray[np.uint64]
    total_count: int


def gain(now: HdrHistogram, before: npt.NDArray[np.unsignedinteger] | None) -> Gain:
    """What `now` gained since `before` (a `counts_copy` of it then; None: since empty).
    A whole histogram is its gain since empty."""
    lo, hi = _occupied(now) if now.total_count else (0, 0)
    counts = _counts(now)[lo:hi]
    if before is not None:
        counts = counts - before[lo:hi]
    nonzero = counts != 0  # trimmed to this gain's own range (argmax: the first True)
    first = int(nonzero.argmax()) if nonzero.size else 0
    if nonzero.size == 0 or not nonzero[first]:
        lo, counts = 0, counts[:0]
    else:
        stop = nonzero.size - int(nonzero[::-1].argmax())
        lo, counts = lo + first, counts[first:stop]
    return Gain(now.lowest_trackable_value, now.highest_trackable_value,
                now.significant_figures, lo, counts, int(counts.sum()))


def gain_blob(g: Gain) -> bytes:
    """A `Gain` as bytes: a header, then its counts (uint32 when they fit, else uint64)."""
    counts = g.counts
    small = counts.size == 0 or int(counts.max()) < 1 << 32
    header = _GAIN_HEADER.pack(_GAIN_MAGIC, g.lowest_trackable_value,
                               g.highest_trackable_value, g.significant_figures, g.lo,
                               4 if small else 8)
    return header + counts.astype("<u4" if small else "<u8").tobytes()


def _decode_gain(blob: bytes) -> HdrHistogram:
    """The inverse of `gain_blob`: a histogram whose extremes are their buckets' lowest
    values (HDR reports extremes to the bucket)."""
    _, lowest, highest, digits, lo, word = _GAIN_HEADER.unpack_from(blob)
    _check_settings(lowest, highest, digits)
    if word not in (4, 8):
        raise ValueError(f"word size {word}")
    counts = np.frombuffer(blob, dtype=f"<u{word}", offset=_GAIN_HEADER.size)
    hist = HdrHistogram(lowest, highest, digits)
    if lo + counts.size > hist.counts_len:
        raise ValueError(f"{counts.size} counts from {lo} past {hist.counts_len}")
    index = np.flatnonzero(counts)
    if index.size == 0:
        return hist
    _counts(hist)[lo:lo + counts.size] = counts
    low, _ = _bucket_bounds(hist, index[[0, -1]].astype(np.int64) + lo)
    hist.total_count = int(counts.sum())
    hist.min_value, hist.max_value = int(low[0]), int(low[1])
    return hist


def _check_settings(lowest: int, highest: int, digits: int) -> None:
    """Refuse settings that make no sense or allocate too many counters."""
    if not 1 <= digits <= 5 or lowest < 1 or highest < 2 * lowest or highest > sys.maxsize:
        raise ValueError(f"bad settings: lowest={lowest} highest={highest} digits={digits}")
    sub_bucket_count = 1 << math.ceil(math.log2(2 * 10**digits))
    unit_magnitude = lowest.bit_length() - 1
    buckets = get_bucket_count(highest, sub_bucket_count, unit_magnitude)
    if (buckets + 1) * (sub_bucket_count // 2) > _MAX_COUNTERS:
        raise ValueError(f"too many counters: lowest={lowest} highest={highest} digits={digits}")


def _check_blob(raw: bytes) -> None:
    """Refuse what the package would choke on or allocate too much for."""
    cookie, length = _EXT_HEADER.unpack_from(raw)
    if codec.get_cookie_base(cookie) != codec.V2_COMPRESSION_COOKIE_BASE:
        raise ValueError(f"not a V2 compressed histogram (cookie {cookie:#x})")
    if length != len(raw) - _EXT_HEADER.size:
        raise ValueError(f"length field {length} != {len(raw) - _EXT_HEADER.size} bytes")
    inflater = zlib.decompressobj()
    limit = _PAYLOAD_HEADER.size + codec.V2_MAX_WORD_SIZE_IN_BYTES * _MAX_COUNTERS
    payload = inflater.decompress(raw[_EXT_HEADER.size :], limit)
    if inflater.unconsumed_tail:
        raise ValueError("payload decompresses past the size limit")
    if not inflater.eof:
        raise ValueError("truncated compressed payload")
    _, _, _, digits, lowest, highest, _ = _PAYLOAD_HEADER.unpack_from(payload)
    _check_settings(lowest, highest, digits)


def decode(text: str | bytes) -> HdrHistogram:
    """A histogram from its V2 base64 form (or `gain_blob`'s); a malformed blob raises
    ResultError."""
    try:
        if isinstance(text, bytes) and text.startswith(_GAIN_MAGIC):
            return _decode_gain(text)
        _check_blob(base64.b64decode(text, validate=True))
        hist: HdrHistogram = HdrHistogram.decode(text)
    except _DECODE_ERRORS as exc:
        raise ResultError(f"malformed HDR histogram blob: {exc}") from exc
    return hist
