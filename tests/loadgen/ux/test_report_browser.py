"""report.html in headless Chromium (Debian's `chromium`, driven by Playwright): every chart
is drawn, no console errors, hovering shows a value, clicking a legend entry hides its
series, and no request leaves the page. Skipped, with the reason, without the browser."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.loadgen.ux import browser
from tests.loadgen.ux.reports import (
    comparison_dir,
    find_peak_dir,
    multiturn_dir,
    run_dir,
    sweep_dir,
)

pytestmark = [pytest.mark.functional,
              pytest.mark.skipif(browser.missing() is not None,
                                 reason=browser.missing() or "")]


def _hover_shows_a_value(tab: Any) -> str:
    """Move the mouse onto the first marker of a chart with markers; the hover label's text."""
    chart = tab.locator(".chart", has=tab.locator(".scatterlayer .trace .points path")).first
    chart.scroll_into_view_if_needed()
    box = chart.locator(".scatterlayer .trace .points path").first.bounding_box()
    assert box is not None
    tab.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    label = chart.locator(".hoverlayer .hovertext")
    label.first.wait_for(state="visible", timeout=10_000)
    return str(label.first.text_content())


def _legend_click_hides_a_series(tab: Any) -> None:
    chart = tab.locator(".chart", has=tab.locator(".legend .traces")).first
    shown = "id => document.getElementById(id).data[0].visible"
    chart_id = chart.get_attribute("id")
    assert tab.evaluate(shown, chart_id) in (None, True)
    traces = chart.locator(".scatterlayer .trace").count()
    chart.locator(".legend .traces").first.click()
    tab.wait_for_function(f"id => ({shown.split('=> ')[1]}) === 'legendonly'", arg=chart_id,
                          timeout=10_000)
    assert chart.locator(".scatterlayer .trace").count() < traces  # its group drawn no more


@pytest.mark.parametrize("build", [run_dir, sweep_dir, find_peak_dir, comparison_dir,
                                   multiturn_dir],
                         ids=["run", "sweep", "find-peak", "comparison", "multi-turn"])
def test_report_in_chromium(build: Callable[[Path], Path], tmp_path: Path) -> None:
    report = build(tmp_path / "dir") / "report.html"
    with browser.page() as (tab, watch):
        charts = browser.open_report(tab, report)
        assert charts >= 3
        drawn = tab.evaluate("""() => [...document.querySelectorAll('.chart')].map(c =>
            c.querySelector('.main-svg') !== null
            && c.querySelectorAll('.scatterlayer .trace, .barlayer .trace').length > 0)""")
        assert drawn == [True] * charts  # every chart drawn, each with a series
        text = _hover_shows_a_value(tab)
        assert any(ch.isdigit() for ch in text), text
        _legend_click_hides_a_series(tab)
        browser.screenshot(tab, tmp_path / "shot.png")
        assert (tmp_path / "shot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert watch.errors == []
    assert watch.remote == []  # nothing left the page: no CDN, no fonts, no beacons
