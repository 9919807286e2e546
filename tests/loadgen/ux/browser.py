"""Headless Chromium for report tests and docs screenshots: Debian's `chromium` driven by
Playwright (no browser download), a fresh profile, nothing reaching the network.

    python -m tests.loadgen.ux.browser docs/     # rebuild the report screenshots in docs/
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:")


def missing() -> str | None:
    """Why the browser cannot run here, or None."""
    if not Path(CHROMIUM).is_file():
        return f"{CHROMIUM} missing (apt-get install chromium; .ci/run installs it)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright missing (pip install -e '.[dev]')"
    return None


@dataclass
class Watch:
    """What a page did: requests that left the machine, console errors, page errors."""

    remote: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@contextlib.contextmanager
def page(width: int = 1280, height: int = 900) -> Iterator[tuple[Any, Watch]]:
    """A Playwright page in a fresh headless Chromium profile, and what it is watched for."""
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="loadgen-chromium-")
    watch = Watch()
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, headless=True, args=ARGS,
                viewport={"width": width, "height": height}, timeout=60_000)
            try:
                tab = context.pages[0] if context.pages else context.new_page()
                tab.on("request", lambda r: None if r.url.startswith(LOCAL_SCHEMES)
                       else watch.remote.append(r.url))
                tab.on("console", lambda m: watch.errors.append(m.text)
                       if m.type == "error" else None)
                tab.on("pageerror", lambda e: watch.errors.append(str(e)))
                yield tab, watch
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def open_report(tab: Any, report: Path) -> int:
    """Load report.html and wait until every chart is drawn; the number of charts."""
    tab.goto(report.resolve().as_uri(), wait_until="load", timeout=60_000)
    charts = tab.locator(".chart").count()
    tab.wait_for_function(
        "n => document.querySelectorAll('.chart .main-svg').length >= n", arg=charts,
        timeout=60_000)
    return int(charts)


def screenshot(tab: Any, out: Path, height: int = 900) -> None:
    """The top of the page as a PNG."""
    tab.screenshot(path=str(out), clip={"x": 0, "y": 0, "width": 1280, "height": height})


def main(out_dir: Path) -> None:
    """Build a demo run and find-peak report and save their screenshots into out_dir."""
    from tests.loadgen.ux.reports import find_peak_dir, run_dir

    with tempfile.TemporaryDirectory() as tmp:
        # runs first: Playwright's sync API holds an event loop while the browser is open
        reports = {name: build(Path(tmp) / name) / "report.html"
                   for name, build in (("report-run", run_dir), ("report-find-peak",
                                                                 find_peak_dir))}
        with page() as (tab, _):
            for name, report in reports.items():
                open_report(tab, report)
                screenshot(tab, out_dir / f"{name}.png")
                print(f"wrote {out_dir / name}.png")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs"))
