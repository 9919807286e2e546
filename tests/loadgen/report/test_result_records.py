"""result.json read into `RunResult` and written again is the file main's code wrote
(tests/data/records), byte for byte: every typed record inside it round-trips."""

import json
from pathlib import Path

from loadgen.report.result import RunResult, read_result

DATA = Path(__file__).parents[2] / "data" / "records"


def test_a_token_run_over_two_workers_round_trips_byte_for_byte():
    path = DATA / "token_workers_result.json"
    doc = json.loads(path.read_text())
    result = read_result(path)
    assert json.dumps(result.to_dict(), indent=2) == json.dumps(doc, indent=2)
    assert RunResult.from_dict(result.to_dict()) == result
    assert result.distributed is not None and len(result.distributed.workers) == 2
    assert result.stats.token_stats is not None
