"""The user guide exists, the README links to it, its pictures and links resolve, and its
troubleshooting covers every INVALID reason code and every scenario."""

from __future__ import annotations

import re
from pathlib import Path

from loadgen.judge.verdict import ReasonCode
from loadgen.plan.settings import Scenario

ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "docs" / "guide.md"


def test_the_readme_links_the_guide() -> None:
    assert "(docs/guide.md)" in (ROOT / "README.md").read_text()


def test_every_local_link_and_picture_resolves() -> None:
    text = GUIDE.read_text()
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert "report-run.png" in targets and "report-find-peak.png" in targets
    for target in targets:
        if "://" not in target:
            assert (GUIDE.parent / target).exists(), target
    for png in ("report-run.png", "report-find-peak.png"):
        data = (GUIDE.parent / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 400_000  # small


def test_every_heading_in_the_contents_exists() -> None:
    text = GUIDE.read_text()
    anchors = re.findall(r"^\d+\. \[[^\]]+\]\(#([^)]+)\)", text, re.MULTILINE)
    headings = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
                for h in re.findall(r"^## (.+)$", text, re.MULTILINE)}
    assert len(anchors) >= 10 and set(anchors) <= headings, set(anchors) - headings


def test_troubleshooting_names_every_reason_code_and_the_guide_every_scenario() -> None:
    text = GUIDE.read_text()
    trouble = text.split("## Troubleshooting")[1]
    for code in ReasonCode:
        assert f"`{code}`" in trouble, code
    for scenario in Scenario:
        assert str(scenario) in text, scenario
    for spec in ("http://", "grpc://", "openai://", "generate://", "llmsim:", "sim:"):
        assert spec in text, spec
