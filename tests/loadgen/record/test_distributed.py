"""result.json's `distributed` block as a typed record: read back and written again, it is the
block main's code wrote (tests/data/records), key for key, in the same order."""

import json
from pathlib import Path

from loadgen.record.distributed import Distributed, LostWorker

DATA = Path(__file__).parents[2] / "data" / "records"


def _block() -> dict:
    return json.loads((DATA / "token_workers_result.json").read_text())["distributed"]


def test_the_block_round_trips_byte_for_byte():
    doc = _block()
    record = Distributed.from_dict(doc)
    assert json.dumps(record.as_dict()) == json.dumps(doc)
    assert record.engine == "processes" and record.nodes == 1 and not record.engine_extra
    assert [w.index for w in record.workers] == [0, 1] and record.lost == ()
    assert record.skew_bound_ns == doc["skew_bound_ns"]


def test_an_engine_s_own_keys_stay_after_nodes_and_a_lost_worker_round_trips():
    doc = _block()
    ray = {"engine": "ray", "version": "2.9", "nodes": 3, "address": "h:6379"}
    lost = {"index": 1, "label": "Ray worker 1", "host": "b", "why": "actor died",
            "lost_at_s": 2.5, "last_report_scheduled_s": 2.0, "planned": 100, "issued": 40,
            "missing": 60, "in_flight_at_last_report": 2}
    rest = {k: v for k, v in doc.items() if k not in ("engine", "version", "nodes", "lost")}
    written = ray | rest | {"lost": [lost]}
    record = Distributed.from_dict(written)
    assert record.engine_extra == {"address": "h:6379"}
    assert record.lost == (LostWorker(**lost),)
    assert json.dumps(record.as_dict()) == json.dumps(written)


def test_of_puts_the_engine_s_description_first():
    figures = Distributed.from_dict(_block())
    made = Distributed.of({"engine": "processes", "version": None, "nodes": 1},
                          split=figures.split, hosts=figures.hosts, start_ns=figures.start_ns,
                          start_margin_ns=figures.start_margin_ns,
                          release_cost_ns=figures.release_cost_ns,
                          skew_bound_ns=figures.skew_bound_ns, workers=figures.workers)
    assert made == figures
    assert made.workers[0].uncertainty_ns == (figures.workers[0].offset_error_ns
                                              + abs(figures.workers[0].drift_ns))
