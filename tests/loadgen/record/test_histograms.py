"""loadgen.record.histograms: bulk recording equals per-value recording; merge, codec, interop."""

from __future__ import annotations

import base64
import math
import struct
import zlib

import numpy as np
import numpy.typing as npt
import pytest
from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

from loadgen.errors import ResultError
from loadgen.record import histograms as record
from loadgen.record.histograms import HIGHEST_NS, Recorder, new_histogram, record_array

PERCENTILES = (0.0, 1.0, 25.0, 50.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0)

# Encoded by HdrHistogram_c from its standard test histograms (lowest 1, highest
# 3.6e9, 3 digits), as carried in HdrHistogram_py's test/test_hdrhistogram.py:
# C_STANDARD holds 10,000 x 1000 and 1 x 100,000,000; C_CORRECTED the same
# recorded with coordinated-omission correction at an interval of 10,000.
C_STANDARD = "HISTFAAAACl4nJNpmSzMwMBgyAABzFCaEURcm7yEwf4DROA8/4I5jNM7mJgAlWkH9g=="
C_CORRECTED = (
    "HISTFAAAAP94nJNpmSzMwCByigECmKE0I4i4NnkJg/0HiMB5/gVzGD8aM/3lZ7rPyTSbjektC9N7Fqa"
    "HzEzbmZi2whCEvZKRaSYj02wwiYng4tFM3lDoC2dhhwh5UyZlJlUMjClCmgpMEUUmQSZ+IBZEojFFCM"
    "vQRwUxenmZ2MGQFUqz4+CTo4I2pg4dFdQylZWJkYkZCaPyMEUIydPLjMHrssFixuB12XD0HRAwMsFJg"
    "kwilZHJHHKmjzp41MFDOjhYmFiQEUEmMWqGsvKBd8Fwd/Co/waTC9jYOMAIiSJRhLbKh5x9Q87Bo/YN"
    "bfsoM4CPhw+IIJAkxnDXN+QcTIpyAPnGh6k="
)
# The blob HdrHistogram-go's and HdrHistogramJS's tests decode: one value, 42.
ONE_VALUE_42 = "HISTFAAAAB542pNpmSzMwMDAxAABzFCaEUoz2X+AMIKZAEARAtM="


def edge_values() -> npt.NDArray[np.int64]:
    """0, 1, HIGHEST_NS and both sides of every power of two (bucket boundaries)."""
    powers = [1 << k for k in range(HIGHEST_NS.bit_length())]
    near = [p + d for p in powers for d in (-1, 0, 1)]
    near += [p * 3 // 2 + d for p in powers for d in (-1, 0, 1)]
    edges = [0, 1, 2, 1023, 1024, 2047, 2048, 2049, HIGHEST_NS - 1, HIGHEST_NS, *near]
    return np.array([v for v in edges if 0 <= v <= HIGHEST_NS], dtype=np.int64)


def lognormal(n: int, seed: int) -> npt.NDArray[np.int64]:
    rng = np.random.default_rng(seed)
    values = np.exp(rng.normal(np.log(2e6), 2.5, n)).astype(np.int64)
    return np.clip(values, 0, HIGHEST_NS)


def per_value(values: npt.NDArray[np.int64]) -> HdrHistogram:
    hist = new_histogram()
    for value in values.tolist():
        assert hist.record_value(value)
    return hist


def counts(hist: HdrHistogram) -> npt.NDArray[np.uint64]:
    return np.ctypeslib.as_array(hist.counts).copy()


def assert_same(got: HdrHistogram, want: HdrHistogram, *, raw_extremes: bool = True) -> None:
    """Same counts, totals, extremes, encoding and percentiles.

    A decoded histogram keeps its extremes as bucket bounds, not raw values: pass
    raw_extremes=False to compare only the bucket-equivalent extremes.
    """
    assert np.array_equal(counts(got), counts(want))
    assert got.total_count == want.total_count
    if raw_extremes:
        assert got.min_value == want.min_value
        assert got.max_value == want.max_value
    assert got.get_min_value() == want.get_min_value()
    assert got.get_max_value() == want.get_max_value()
    assert got.encode() == want.encode()
    for p in PERCENTILES:
        assert got.get_value_at_percentile(p) == want.get_value_at_percentile(p)


def test_bulk_record_equals_record_value() -> None:
    values = np.concatenate([lognormal(20_000, seed=1), edge_values()])
    np.random.default_rng(2).shuffle(values)
    bulk = new_histogram()
    assert record_array(bulk, values) == 0
    slow = per_value(values)
    assert_same(bulk, slow)
    assert bulk.get_mean_value() == slow.get_mean_value()
    assert bulk.get_stddev() == slow.get_stddev()
    for p in PERCENTILES:
        assert record.percentile_ns(bulk, p) == slow.get_value_at_percentile(p)


def test_bulk_record_in_chunks_and_dtypes() -> None:
    values = lognormal(5_000, seed=3)
    hist = new_histogram()
    for chunk in np.array_split(values, 7):
        record_array(hist, chunk.astype(np.uint64))
    record_array(hist, np.array([], dtype=np.int64))
    assert_same(hist, per_value(values))
    with pytest.raises(TypeError):
        record_array(hist, np.array([1.5, 2.0]))


def test_out_of_range_counted_not_recorded() -> None:
    inside = np.array([0, 5, HIGHEST_NS], dtype=np.int64)
    outside = np.array([-1, -(10**12), HIGHEST_NS + 1, 2**62], dtype=np.int64)
    hist = new_histogram()
    assert record_array(hist, np.concatenate([outside[:2], inside, outside[2:]])) == 4
    assert_same(hist, per_value(inside))
    assert record_array(hist, outside) == 4
    assert hist.total_count == 3
    assert record_array(new_histogram(), np.array([2**64 - 1], dtype=np.uint64)) == 1


def test_percentiles_match_sorted_values_within_hdr_precision() -> None:
    values = lognormal(100_000, seed=4)  # p * n / 100 is a whole rank for each p below
    exact = np.sort(values)
    hist = new_histogram()
    record_array(hist, values)
    for p in (50.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0):
        rank = round(p * values.size / 100)  # nearest rank, 1-based (whole here)
        assert math.isclose(rank, p * values.size / 100)
        want = int(exact[rank - 1])
        got = record.percentile_ns(hist, p)
        assert want <= got <= want * (1 + 1e-3), (p, want, got)
    with pytest.raises(ValueError):
        record.percentile_ns(hist, 100.5)


def test_summary() -> None:
    values = lognormal(10_000, seed=5)
    hist = new_histogram()
    record_array(hist, values)
    summary = record.summary_ns(hist)
    assert list(summary) == ["p50", "p90", "p95", "p99", "p999", "mean", "min", "max", "count"]
    assert summary["count"] == values.size
    assert summary["p50"] == hist.get_value_at_percentile(50.0)
    assert summary["p999"] == hist.get_value_at_percentile(99.9)
    assert summary["mean"] == round(hist.get_mean_value())
    assert summary["min"] == hist.get_min_value() and summary["max"] == hist.get_max_value()
    assert all(isinstance(v, int) for v in summary.values())
    assert set(record.summary_ns(new_histogram()).values()) == {0}


def test_flush_some_records_one_slice_and_keeps_the_rest() -> None:
    values = lognormal(record.FLUSH_SLICE * 2 + 100, seed=8)
    rec = Recorder()
    for value in values.tolist():
        rec.add(value)
    rec.flush_some()
    assert rec.pending == values.size - record.FLUSH_SLICE
    assert rec._hist.total_count == record.FLUSH_SLICE  # only the slice reached the histogram
    while rec.pending:
        rec.flush_some()
    want = new_histogram()
    record_array(want, values)
    assert np.array_equal(record._counts(rec.histogram), record._counts(want))
    assert (rec.histogram.min_value, rec.histogram.max_value) == (want.min_value, want.max_value)


def test_recorder_bounded_buffer_and_counts() -> None:
    values = lognormal(1_000_000, seed=6).tolist()
    rec = Recorder()
    most = 0
    for value in values:
        rec.add(value)
        most = max(most, rec.pending)
    assert most == record.BUFFER_CAPACITY - 1  # flushed the moment it fills, never beyond
    for bad in (-1, HIGHEST_NS + 1, 2**70):
        rec.add(bad)
    rec.add_array(np.array([-3, 7], dtype=np.int64))
    assert rec.count == len(values) + 1
    assert rec.out_of_range == 4
    assert rec.pending == 0
    want = new_histogram()
    record_array(want, np.array([*values, 7], dtype=np.int64))
    assert_same(rec.histogram, want)
    with pytest.raises(TypeError):
        rec.add(1.5)  # type: ignore[arg-type]


def test_merge_equals_recording_everything_into_one() -> None:
    values = np.concatenate([lognormal(30_000, seed=7), edge_values()])
    parts = []
    for chunk in np.array_split(values, 5):
        hist = new_histogram()
        record_array(hist, chunk)
        parts.append(hist)
    whole = new_histogram()
    record_array(whole, values)
    # an empty part, and a part that went through the wire format
    merged = record.merge([new_histogram(), *parts[:-1], record.decode(record.encode(parts[-1]))])
    assert_same(merged, whole, raw_extremes=False)
    assert_same(record.merge(parts), whole)


def test_merge_with_an_empty_histogram_keeps_the_minimum() -> None:
    hist = new_histogram()
    record_array(hist, np.array([5_000, 9_000], dtype=np.int64))
    assert record.merge([hist, new_histogram()]).get_min_value() == 5_000
    hist.add(new_histogram())  # the package's own add takes the empty one's minimum, 0
    assert hist.get_min_value() == 0


def test_merge_other_layout_rerecords_bucket_lowest_values() -> None:
    coarse = HdrHistogram(1, HIGHEST_NS, 2)
    values = lognormal(2_000, seed=8)
    for value in values.tolist():
        coarse.record_value(value)
    lowest = [coarse.get_lowest_equivalent_value(v) for v in values.tolist()]
    want = new_histogram()
    record_array(want, np.array(lowest, dtype=np.int64))
    merged = record.merge([coarse])
    assert np.array_equal(counts(merged), counts(want))
    assert merged.total_count == values.size
    wide = HdrHistogram(1, 2**50, 2)
    wide.record_value(2**49)
    with pytest.raises(ValueError):
        record.merge([wide])


def test_encode_decode_roundtrip() -> None:
    hist = new_histogram()
    record_array(hist, np.concatenate([lognormal(10_000, seed=9), edge_values()]))
    text = record.encode(hist)
    assert isinstance(text, str) and text.startswith("HISTFAAA")
    back = record.decode(text)
    assert np.array_equal(counts(back), counts(hist))
    assert back.total_count == hist.total_count
    assert back.get_min_value() == hist.get_min_value()
    assert back.get_max_value() == hist.get_max_value()
    assert record.summary_ns(back) == record.summary_ns(hist)
    assert record.encode(back) == text
    empty = record.decode(record.encode(new_histogram()))
    assert empty.total_count == 0


def test_decode_blobs_from_hdrhistogram_c() -> None:
    standard = record.decode(C_STANDARD)
    assert standard.total_count == 10_001
    for p, want in ((30.0, 1000), (99.0, 1000), (99.99, 1000), (99.999, 10**8), (100.0, 10**8)):
        assert abs(record.percentile_ns(standard, p) - want) < want * 1e-3
    assert standard.values_are_equivalent(standard.get_min_value(), 1000)
    assert standard.values_are_equivalent(standard.get_max_value(), 10**8)

    corrected = record.decode(C_CORRECTED)
    assert corrected.total_count == 20_000
    expected = ((30.0, 1000), (50.0, 1000), (75.0, 5 * 10**7), (90.0, 8 * 10**7),
                (99.0, 98 * 10**6), (99.999, 10**8), (100.0, 10**8))  # fmt: skip
    for p, want in expected:
        assert abs(record.percentile_ns(corrected, p) - want) < want * 1e-3
        assert record.percentile_ns(corrected, p) == corrected.get_value_at_percentile(p)

    merged = record.merge([standard, corrected])  # smaller range, same layout: fast path
    assert merged.total_count == 30_001
    assert record.summary_ns(merged)["max"] == standard.get_max_value()


def test_decode_blob_from_other_ports() -> None:
    hist = record.decode(ONE_VALUE_42)
    assert hist.total_count == 1
    assert hist.get_mean_value() == 42.0
    assert record.summary_ns(hist)["p50"] == 42


def _blob(payload_header: bytes, body: bytes = b"", level: int = 6) -> str:
    compressed = zlib.compress(payload_header + body, level)
    header = struct.pack(">II", 0x1C849314, len(compressed))
    return base64.b64encode(header + compressed).decode("ascii")


def _payload_header(digits: int = 3, lowest: int = 1, highest: int = HIGHEST_NS) -> bytes:
    return struct.pack(">IIIIQQd", 0x1C849303 | 0x10, 0, 0, digits, lowest, highest, 1.0)


MALFORMED = {
    "empty": "",
    "garbage": "this is not a histogram",
    "non-ascii": "HISTFAAA\u00e9",
    "bad cookie": base64.b64encode(b"\x00" * 40).decode("ascii"),
    "flipped payload": C_STANDARD[:30] + ("A" if C_STANDARD[30] != "A" else "B") + C_STANDARD[31:],
    "bad digits": _blob(_payload_header(digits=9)),
    "zero lowest": _blob(_payload_header(lowest=0)),
    "too many counters": _blob(_payload_header(digits=5, highest=2**62)),
    "short payload header": _blob(_payload_header()[:20]),
    "counter past the end": _blob(_payload_header(), b"\x02" * 40_000),
    "truncated varint": _blob(_payload_header(), b"\xff\xff"),
    "zlib bomb": _blob(_payload_header(), bytes(24 << 20), level=9),
}


@pytest.mark.parametrize("text", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_blobs_raise_result_error(text: str) -> None:
    with pytest.raises(ResultError):
        record.decode(text)


@pytest.mark.parametrize("blob", [C_STANDARD, C_CORRECTED], ids=["standard", "corrected"])
def test_every_truncation_raises_result_error(blob: str) -> None:
    for cut in range(len(blob)):
        with pytest.raises(ResultError):
            record.decode(blob[:cut])


def test_all_lists_the_public_names() -> None:
    defined = {
        name
        for name, value in vars(record).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == record.__name__
    }
    constants = {name for name in vars(record) if name.isupper() and not name.startswith("_")}
    assert sorted(record.__all__) == sorted(defined | constants)


def _counts(hist: HdrHistogram) -> npt.NDArray[np.uint64]:
    return np.ctypeslib.as_array(hist.counts)


def _spread(n: int, seed: int) -> npt.NDArray[np.int64]:
    return np.random.default_rng(seed).lognormal(11, 1.5, n).astype(np.int64) + 1


def test_a_gain_holds_exactly_what_was_added_since_the_snapshot() -> None:
    hist = new_histogram()
    record_array(hist, _spread(5_000, 1))
    before = record.counts_copy(hist)
    later = _spread(3_000, 2)
    record_array(hist, later)
    want = new_histogram()
    record_array(want, later)
    got = record.decode(record.gain_blob(record.gain(hist, before)))
    assert np.array_equal(_counts(got), _counts(want))
    assert got.total_count == 3_000 == record.gain(hist, before).total_count
    assert record.summary_ns(got) == record.summary_ns(want)  # extremes to the bucket
    whole = record.decode(record.gain_blob(record.gain(hist, None)))  # a gain since empty
    assert np.array_equal(_counts(whole), _counts(hist))


def test_a_gain_is_sized_by_the_buckets_it_spans_and_none_is_empty() -> None:
    hist = new_histogram()
    record_array(hist, np.array([1_000, 1_001, 1_002], dtype=np.int64))
    g = record.gain(hist, None)
    assert g.counts.size == 3 and g.total_count == 3  # not the 33,792 counters of a V2 blob
    nothing = record.gain(hist, record.counts_copy(hist))
    assert nothing.total_count == 0 and nothing.counts.size == 0
    assert record.decode(record.gain_blob(nothing)).total_count == 0


def _gain_blob(lo: int = 0, word: int = 4, digits: int = 3, body: bytes = b"\x01\0\0\0") -> bytes:
    header = struct.pack("<8sQQIQB", b"hdrgain1", 1, HIGHEST_NS, digits, lo, word)
    return header + body


@pytest.mark.parametrize("blob", [
    _gain_blob(lo=33_792), _gain_blob(word=3), _gain_blob(digits=9), _gain_blob()[:20],
    _gain_blob(body=b"\x01\0\0"),
], ids=["past the end", "word size", "bad digits", "short header", "ragged counts"])
def test_malformed_gains_raise_result_error(blob: bytes) -> None:
    with pytest.raises(ResultError):
        record.decode(blob)
