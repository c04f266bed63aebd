"""Browser fixtures: Debian's chromium driven by Playwright's sync API against ``live_server``.

The browser is never downloaded: Playwright launches the executable named by CHROMIUM
(``make test`` passes /usr/bin/chromium and installs the Debian package when missing).
One browser per session; a fresh context (cookies, viewport) and page per test.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, ViewportSize, sync_playwright
from pytest_django.live_server_helper import LiveServer

# Playwright's sync API runs an asyncio event loop (inside a greenlet) on the test
# thread, and the loop stays registered as "running" there until the browser session
# ends. Django then refuses ORM calls from that thread (SynchronousOnlyOperation), both
# in these tests (seeding data, reading it back) and in every test that runs after
# them in the same session. The calls are plain synchronous ones on the test thread,
# not from a coroutine, so the check is a false alarm here: switch it off.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

REPO_ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT_DIR = REPO_ROOT / "test-output" / "browser"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP: ViewportSize = {"width": 1280, "height": 900}
TIMEOUT_MS = 10_000

Screenshot = Callable[[Page, str], Path]


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    executable = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    if not (os.path.isfile(executable) and os.access(executable, os.X_OK)):
        pytest.fail(
            f"The browser tests need Debian's chromium at {executable} (set CHROMIUM to use another path). "
            "`make test` installs it when missing (apt-get install chromium); Playwright never downloads one.",
            pytrace=False,
        )
    playwright = sync_playwright().start()
    try:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()
    finally:
        playwright.stop()


@pytest.fixture
def page_errors() -> list[str]:
    """Uncaught script errors and failed same-site requests seen by ``page``."""
    return []


@pytest.fixture
def context(browser: Browser, live_server: LiveServer) -> Iterator[BrowserContext]:
    created = browser.new_context(base_url=live_server.url, viewport=DESKTOP)
    created.set_default_timeout(TIMEOUT_MS)
    try:
        yield created
    finally:
        created.close()


@pytest.fixture
def page(context: BrowserContext, live_server: LiveServer, page_errors: list[str]) -> Page:
    opened = context.new_page()
    opened.on("pageerror", lambda error: page_errors.append(f"script error: {error}"))
    # A request the page itself cancelled (net::ERR_ABORTED: a navigation away while an htmx
    # fragment was still loading) is not a failure; a refused or blocked one is
    # (ERR_CONNECTION_REFUSED, ERR_BLOCKED_BY_CSP, ...).
    opened.on(
        "requestfailed",
        lambda request: (
            page_errors.append(f"request failed: {request.url} ({request.failure})")
            if request.url.startswith(live_server.url) and "ERR_ABORTED" not in str(request.failure)
            else None
        ),
    )
    opened.on(
        "response",
        lambda response: (
            page_errors.append(f"{response.status} for {response.url}")
            if "/static/" in response.url and response.status >= 400
            else None
        ),
    )
    return opened


@pytest.fixture
def screenshot(request: pytest.FixtureRequest) -> Screenshot:
    """Save a full-page screenshot as test-output/browser/<test-name>-<step>.png."""

    def take(target: Page, step: str) -> Path:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{request.node.name}-{step}")
        path = SCREENSHOT_DIR / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        target.screenshot(path=str(path), full_page=True)
        return path

    return take
