"""ShareGPT conversations as multi-turn sessions (`dataset_turns`): each session asks its
conversation's human turns in order, as many as it has, with the reference answers' token
lengths as output lengths."""

from __future__ import annotations

import json
from pathlib import Path

from loadgen.adapters.llmsim import CostModel, LlmSimSut
from loadgen.adapters.tokens import Turn
from loadgen.api import run_test
from loadgen.plan.settings import settings_from_mapping
from loadgen.plan.words import count_tokens

MS, US = 1_000_000, 1_000

CONVERSATIONS = [
    [("human", "Plan a trip to Lisbon."), ("gpt", "Day one: Alfama and the castle."),
     ("human", "And day two?"), ("gpt", "Belem, the tower and the pastries there."),
     ("human", "Where to eat?"), ("gpt", "Try a tasca.")],
    [("system", "Be terse."), ("human", "What is BPE?"), ("gpt", "Byte pair encoding."),
     ("human", "Who uses it?"), ("gpt", "GPT tokenizers, among others.")],
]


class Recording(LlmSimSut):
    """llmsim that keeps each turn's (session, index, count, prompt text, max tokens)."""

    def __init__(self) -> None:
        super().__init__(CostModel(step_base_ns=1 * MS, step_per_seq_ns=100 * US,
                                   prefill_per_token_ns=10 * US))
        self.asked: list[tuple[int, int, int, str, int]] = []

    def issue_turn(self, query_id: int, sample: int, turn: Turn) -> None:
        prompt = self._prompt(sample)
        self.asked.append((turn.session, turn.index, turn.count, prompt.text, prompt.max_tokens))
        super().issue_turn(query_id, sample, turn)


def test_each_session_asks_its_conversations_turns_in_order(tmp_path: Path) -> None:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps([{"conversations": [{"from": w, "value": v} for w, v in c]}
                                for c in CONVERSATIONS]))
    settings = settings_from_mapping({
        "scenario": "Server", "target_qps": 30.0, "preset": "dev", "min_duration_s": 0.3,
        "min_query_count": 10, "target_latency_ms": 1000.0, "target_latency_percentile": 50.0,
        "max_issue_lag_ms": 1000.0, "dataset": str(path), "dataset_format": "sharegpt",
        "dataset_turns": True, "think_time_ms": 2.0})
    sut = Recording()
    result = run_test(settings, sut, out_dir=tmp_path / "run")
    expected = {c[0][1] if c[0][0] == "human" else c[1][1]:
                [(v, count_tokens(a, "approx")) for (w, v), (_, a) in zip(c, c[1:], strict=False)
                 if w == "human"] for c in CONVERSATIONS}
    sessions: dict[int, list[tuple[int, int, str, int]]] = {}
    for session, index, count, text, max_tokens in sut.asked:
        sessions.setdefault(session, []).append((index, count, text, max_tokens))
    assert len(sessions) >= 10 and {len(t) for t in sessions.values()} == {2, 3}
    for turns in sessions.values():
        want = expected[turns[0][2]]
        assert [(text, n) for _, _, text, n in turns] == want  # every turn, in order
        assert [index for index, *_ in turns] == list(range(1, len(want) + 1))
        assert {count for _, count, _, _ in turns} == {len(want)}
    doc = json.loads((tmp_path / "run/result.json").read_text())
    assert doc["turns"]["1"]["count"] == len(sessions) == doc["turns"]["2"]["count"]
    assert doc["turns"]["3"]["count"] == sum(len(t) == 3 for t in sessions.values())
    assert result.stats.errors == 0
