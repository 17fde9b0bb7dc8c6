"""Real headless Chromium (Debian's ``chromium`` package, which scripts/test installs when missing),
driven by Playwright's async API. One server and one browser per test module; one fresh browser
context (cookies, storage) per test. Playwright never downloads a browser here."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from switchboard.core.clock import ManualClock
from tests.support.server import Instance, make_settings, run_instance

CHROMIUM = os.environ.get("SWITCHBOARD_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Screenshots land in docs/screenshots/ only when asked (SWITCHBOARD_SCREENSHOTS=1), so an ordinary test
# run leaves the working tree clean; otherwise they still get taken, into a scratch folder.
SCREENSHOTS = (
    Path(__file__).resolve().parents[2] / "docs" / "screenshots"
    if os.environ.get("SWITCHBOARD_SCREENSHOTS")
    else Path(tempfile.gettempdir()) / "switchboard-screenshots"
)

playwright_api = pytest.importorskip(
    "playwright.async_api", reason="the playwright package is in the test extras"
)

if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
    pytest.skip(
        f"no Chromium at {CHROMIUM}: scripts/test installs Debian's chromium", allow_module_level=True
    )

# Generous ceilings, not waits: every wait is for a condition, and a loaded CI machine may be slow.
TIMEOUT_MS = 20_000
playwright_api.expect.set_options(timeout=TIMEOUT_MS)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Instance]:
    settings = make_settings(tmp_path_factory.mktemp("browser"))
    async with run_instance(settings, clock=ManualClock(time.time())) as inst:
        yield inst


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def browser() -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as pw:
        # launch() gives every run a fresh temporary user-data-dir.
        chromium = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Any) -> AsyncIterator[Any]:
    context = await browser.new_context(
        viewport={"width": 1280, "height": 860}, timezone_id="Europe/Berlin", locale="en-GB"
    )
    context.set_default_timeout(TIMEOUT_MS)
    tab = await context.new_page()
    tab.on("dialog", lambda dialog: dialog.accept())  # the UI confirms destructive actions
    try:
        yield tab
    finally:
        await context.close()


async def shoot(page: Any, name: str) -> None:
    """Save a full-page screenshot of the current page under docs/screenshots/."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


# axe-core, pinned, from the npm registry with the ordinary client into a cache folder (never a CDN);
# injected into the page under test with add_script_tag.
AXE_VERSION = "4.11.0"
AXE_CACHE = Path(os.environ.get("SWITCHBOARD_TEST_CACHE", Path.home() / ".cache" / "switchboard-tests"))
WIDTHS = {"phone": {"width": 390, "height": 844}, "desktop": {"width": 1280, "height": 860}}


@pytest.fixture(scope="session")
def axe_source() -> str:
    import subprocess

    prefix = AXE_CACHE / f"axe-core-{AXE_VERSION}"
    script = prefix / "node_modules" / "axe-core" / "axe.min.js"
    if not script.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail(
                "npm is needed to install axe-core for the accessibility checks (apt-get install npm)"
            )
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), f"axe-core@{AXE_VERSION}"],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return script.read_text()


async def fits_and_passes_axe(page: Any, axe: str, label: str) -> list[str]:
    """What is wrong with the page: horizontal scroll at its viewport width, and each axe-core WCAG 2.1
    A/AA violation (colour contrast and labels included). Empty when the page is fine."""
    problems: list[str] = []
    widths = await page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    if widths[0] > widths[1]:
        wide = await page.evaluate(
            """() => Array.from(document.querySelectorAll('body *'))
                .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
                .slice(0, 6).map(e => e.tagName.toLowerCase() + '.' + e.className)"""
        )
        problems.append(f"{label}: {widths[0]} px wide in a {widths[1]} px viewport; too wide: {wide}")
    if not await page.evaluate("() => typeof window.axe !== 'undefined'"):
        await page.add_script_tag(content=axe)
    result = await page.evaluate(
        """async () => {
            const r = await axe.run(document, {runOnly: {type: 'tag',
                values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}, resultTypes: ['violations']});
            return r.violations.map(v => ({id: v.id, impact: v.impact,
                nodes: v.nodes.slice(0, 3).map(n => n.target.join(' ') + ' :: ' + n.failureSummary)}));
        }"""
    )
    problems += [f"{label}: axe {v}" for v in result]
    return problems
