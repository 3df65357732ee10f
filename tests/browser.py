"""A real headless Chromium for the HTML viewer tests: Debian's package driven by Playwright.

No browser can be downloaded, so the path is set explicitly; `scripts/install_browser.sh`
installs both. Locally a missing browser skips the test; in CI (`CI=true`) it fails it.
"""

import contextlib
import os

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

# What a canvas shows, read in the page (moving every pixel to Python is slow): its PNG, and
# the overlay's opacity at a few points.
CANVAS_PNG = "canvas => canvas.toDataURL()"
CANVAS_ALPHAS = """(canvas, points) => points.map(
    ([x, y]) => canvas.getContext("2d").getImageData(x, y, 1, 1).data[3])"""


def browser_missing():
    """Why the browser cannot run here, or None."""
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is not installed (bash scripts/install_browser.sh installs it)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (bash scripts/install_browser.sh installs it)"
    return None


def require_browser():
    """Skips the calling test without a browser (fails it in CI, which installs one)."""
    missing = browser_missing()
    if missing is not None:
        if os.environ.get("CI") == "true":  # CI installs the browser: never skip there
            pytest.fail(missing)
        pytest.skip(missing)


@contextlib.contextmanager
def open_page(url, viewport=(1000, 900)):
    """A page of a fresh headless Chromium at `url`, and the lists of page errors and requests."""
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            errors, requests = [], []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("request", lambda request: requests.append(request.url))
            page.goto(url)
            yield page, errors, requests
        finally:
            browser.close()
