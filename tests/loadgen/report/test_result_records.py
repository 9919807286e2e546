"""result.json read into `RunResult` and written again is the file main's code wrote
(tests/data/records), byte for byte: every typed record inside it round-trips."""

import json
from pathlib import Path

from loadgen.report.result import RunResult, read_result

DATA = Path(__file__).parents[2] / "data" / "records"


def later_additions(written: dict, fixture: dict) -> dict[str, set[str]]:
    """Keys of a block the fixture lacks: fields merged after it was written (the settings'
    new knobs, `tokens.tokenizer`), each written by those branches' own code."""
    return {block: set(written[block]) - set(fixture[block]) for block in written
            if isinstance(written[block], dict) and block in fixture
            and isinstance(fixture[block], dict) and set(written[block]) - set(fixture[block])}


def without(written: dict, added: dict[str, set[str]]) -> dict:
    """`written` with the later additions taken out (order kept)."""
    return {k: {kk: vv for kk, vv in v.items() if kk not in added[k]} if k in added else v
            for k, v in written.items()}


def test_a_token_run_over_two_workers_round_trips_byte_for_byte():
    path = DATA / "token_workers_result.json"
    doc = json.loads(path.read_text())
    result = read_result(path)
    written = result.to_dict()
    added = later_additions(written, doc)
    assert set(added) <= {"settings", "tokens"}  # fields other branches added since (#33)
    assert json.dumps(without(written, added), indent=2) == json.dumps(doc, indent=2)
    assert RunResult.from_dict(result.to_dict()) == result
    assert result.distributed is not None and len(result.distributed.workers) == 2
    assert result.stats.token_stats is not None
