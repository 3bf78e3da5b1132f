"""A real headless Chromium for the tests of HTML pages (incident pages, run reports), driven through
Selenium with Debian's `chromium` and `chromedriver` (`scripts/services up` installs them; selenium
is in `.[dev]`). A test that finds any of the three missing is skipped, saying which.

The browser reaches nothing beyond this machine. Every host name and IP literal but 127.0.0.1 and
localhost resolves to nothing (`--host-resolver-rules`), and every request that is not to loopback
goes to a proxy port that is bound but never listens, so it is refused on the spot
(`net::ERR_PROXY_CONNECTION_FAILED`) instead of hanging or, worse, leaving: this machine does answer
some off-machine addresses (without these flags `http://203.0.113.1/x.png` got an HTTP 404 here).

Every request the page makes is recorded from the DevTools performance log
(`Network.requestWillBeSent`, redirects included; the cache is disabled so nothing is served
unseen; a data: image the renderer decodes itself makes no request), and so is the console, so a
test can assert both that the page asked for nothing outside (`outside_requests() == []`) and that
it logged no error (`console_errors() == []`). The records are those since the last `open()`;
`open()` returns when the document is complete and the network has been quiet for a moment, so
requests made just after the load event (the favicon) are in.

For page authors: over http Chromium asks for /favicon.ico (once per origin and session), and the
404 a test server answers is a SEVERE console entry ("Failed to load resource: ... 404"). A page
should carry
`<link rel="icon" href="data:,">` (`NO_FAVICON`) in its <head>; the helper reports that entry as it
reports any other rather than hide it.

    with Browser() as browser:
        browser.open(url)
        assert browser.console_errors() == []
        assert browser.outside_requests() == []
        browser.find_css("svg circle#gpu-07").get_attribute("fill")
        browser.screenshot("incident.png")  # into tests/artifacts/ or $AIOPS_TEST_ARTIFACTS
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

import pytest

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WINDOW = (1400, 1000)  # the viewport, and so every screenshot: width, height in CSS pixels
NO_FAVICON = '<link rel="icon" href="data:,">'
LOCAL_SCHEMES = frozenset({"file", "data", "about", "blob"})
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost"})


def is_local(url: str) -> bool:
    """True for what never leaves the machine: file:, data:, about:, blob: and loopback URLs."""
    parts = urlsplit(url)
    if parts.scheme in LOCAL_SCHEMES:
        return True
    return parts.scheme in {"http", "https", "ws", "wss"} and parts.hostname in LOCAL_HOSTS


def missing(chromium: Path = CHROMIUM, chromedriver: Path = CHROMEDRIVER) -> list[str]:
    """What the browser tests need and this machine lacks."""
    lacking = [f"{name} ({path})" for name, path in (("chromium", chromium), ("chromedriver", chromedriver))
               if not os.access(path, os.X_OK)]  # fmt: skip
    if importlib.util.find_spec("selenium") is None:
        lacking.append("selenium (the Python package)")
    return lacking


def artifacts_dir() -> Path:
    """Where screenshots go: $AIOPS_TEST_ARTIFACTS, else tests/artifacts/ (ignored by git)."""
    path = Path(os.environ.get("AIOPS_TEST_ARTIFACTS") or ROOT / "tests" / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class ConsoleEntry:
    level: str  # SEVERE, WARNING, INFO, DEBUG
    source: str  # javascript, network, console-api, ...
    message: str


class Browser:
    """One headless Chromium session. A context manager; `close()` ends it."""

    def __init__(
        self,
        *,
        window: tuple[int, int] = WINDOW,
        chromium: Path = CHROMIUM,
        chromedriver: Path = CHROMEDRIVER,
        timeout: float = 30.0,
    ) -> None:
        lacking = missing(chromium, chromedriver)
        if lacking:
            pytest.skip(
                f"no headless browser: {', '.join(lacking)} missing; `scripts/services up` installs "
                "Debian's chromium and chromium-driver, `scripts/bootstrap` installs selenium (.[dev])"
            )
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        self.window = window
        self.timeout = timeout
        self._requests: list[str] = []
        self._pending: dict[str, str] = {}  # DevTools requestId -> URL, until it finished or failed
        self._failures: dict[str, str] = {}  # URL -> Chromium's net error
        self._console: list[ConsoleEntry] = []
        self._last_network_event = time.monotonic()
        # A proxy port that refuses at once: bound, so nothing else can take it, never listening.
        self._dead_proxy = socket.socket()
        self._dead_proxy.bind(("127.0.0.1", 0))
        proxy_port = self._dead_proxy.getsockname()[1]

        options = webdriver.ChromeOptions()
        options.binary_location = str(chromium)
        for flag in (
            # root in a container, no display, no GPU, a small /dev/shm
            "--headless=new",
            "--no-sandbox",
            "--disable-dev-shm-usage",
            "--disable-gpu",
            f"--window-size={window[0]},{window[1]}",
            # nothing beyond this machine (see the module's docstring)
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
            f"--proxy-server=http://127.0.0.1:{proxy_port}",
            "--proxy-bypass-list=127.0.0.1;localhost",
            "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
            "--disable-quic",
            # and no traffic of the browser's own (updates, sync, metrics, translation)
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-domain-reliability",
            "--disable-sync",
            "--disable-extensions",
            "--disable-default-apps",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-features=Translate,OptimizationHints,MediaRouter",
        ):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})

        started = time.monotonic()
        try:
            self.driver: WebDriver = webdriver.Chrome(
                service=Service(executable_path=str(chromedriver)), options=options
            )
        except BaseException:
            self._dead_proxy.close()
            raise
        try:
            self.driver.set_page_load_timeout(timeout)
            self.driver.set_script_timeout(timeout)
            # --window-size is the outer window; headless keeps room for a toolbar inside it.
            self.driver.execute_cdp_cmd(
                "Emulation.setDeviceMetricsOverride",
                {"width": window[0], "height": window[1], "deviceScaleFactor": 1, "mobile": False},
            )
            self.driver.execute_cdp_cmd("Network.enable", {})
            self.driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
        except BaseException:
            self.close()
            raise
        self.startup_seconds = time.monotonic() - started

    # ------------------------------------------------------------ navigation

    def open(self, url: str, *, quiet: float = 0.3) -> None:
        """Load `url` and return when its document is complete and the network has been idle for
        `quiet` seconds (0: do not wait for that). Starts the request and console records anew."""
        from selenium.webdriver.support.wait import WebDriverWait

        self._drain()
        self._requests.clear()
        self._pending.clear()
        self._failures.clear()
        self._console.clear()
        self.driver.get(url)
        WebDriverWait(self.driver, self.timeout).until(
            lambda d: d.execute_script("return document.readyState") == "complete",
            f"{url}: document.readyState never became complete",
        )
        if quiet > 0:
            self.wait_idle(quiet)

    def wait_until(self, script: str, message: str = "") -> Any:
        """Poll `script` (a function body) until it returns something truthy; return that. Raises
        selenium's TimeoutException after `timeout` s."""
        from selenium.webdriver.support.wait import WebDriverWait

        return WebDriverWait(self.driver, self.timeout, poll_frequency=0.05).until(
            lambda d: d.execute_script(script), message or f"never true: {script}"
        )

    def wait_idle(self, quiet: float = 0.3) -> None:
        """Wait until every request seen has finished or failed and none started for `quiet` s."""
        deadline = time.monotonic() + self.timeout
        while True:
            self._drain()
            if not self._pending and time.monotonic() - self._last_network_event >= quiet:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"requests still open after {self.timeout}s: {sorted(self._pending.values())}")
            time.sleep(0.05)

    # ------------------------------------------------------------ records

    def requests(self) -> list[str]:
        """Every URL the page requested since the last open(), in order (redirect hops included)."""
        self._drain()
        return list(self._requests)

    def outside_requests(self) -> list[str]:
        """The requested URLs that are not file:, data:, about:, blob: or to 127.0.0.1/localhost."""
        return [url for url in self.requests() if not is_local(url)]

    def failures(self) -> dict[str, str]:
        """URL -> Chromium's error (net::ERR_...) for each request that failed since the last open()."""
        self._drain()
        return dict(self._failures)

    def console(self) -> list[ConsoleEntry]:
        """Everything the browser logged since the last open()."""
        self._drain()
        return list(self._console)

    def console_errors(self) -> list[ConsoleEntry]:
        """The SEVERE entries: uncaught exceptions, console.error, failed loads (a favicon 404 too)."""
        return [entry for entry in self.console() if entry.level == "SEVERE"]

    def _drain(self) -> None:
        # chromedriver hands each log entry out once: keep them here.
        for raw in self._log("performance"):
            event = json.loads(raw["message"])["message"]
            method: str = event.get("method", "")
            params: dict[str, Any] = event.get("params", {})
            if not method.startswith("Network."):
                continue
            self._last_network_event = time.monotonic()
            if method == "Network.requestWillBeSent":
                url = params["request"]["url"] + params["request"].get("urlFragment", "")
                self._requests.append(url)
                self._pending[params["requestId"]] = url
            elif method == "Network.loadingFinished":
                self._pending.pop(params["requestId"], None)
            elif method == "Network.loadingFailed":
                url = self._pending.pop(params["requestId"], "")
                if url:
                    self._failures[url] = params.get("errorText", "")
        for raw in self._log("browser"):
            self._console.append(ConsoleEntry(raw["level"], raw.get("source", ""), raw["message"]))

    def _log(self, kind: str) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self.driver.get_log(kind)  # type: ignore[no-untyped-call]
        return entries

    # ------------------------------------------------------------ page

    def find_css(self, selector: str) -> WebElement:
        """The first element matching `selector`; NoSuchElementException if there is none."""
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def find_all_css(self, selector: str) -> list[WebElement]:
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def execute(self, script: str, *args: Any) -> Any:
        """Run `script` as a function body in the page (`return ...` for a value)."""
        return self.driver.execute_script(script, *args)

    def resize(self, width: int, height: int, *, mobile: bool = False) -> None:
        """Change the viewport (and so the screenshots) to `width` x `height` CSS pixels; `mobile`
        emulates a phone's layout viewport (the page's own width, overlay scrollbars)."""
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
        )
        self.window = (width, height)

    def screenshot(self, path: str | Path) -> Path:
        """Write the viewport as a PNG of exactly `window` pixels; a relative path is taken in
        artifacts_dir(). Returns where it went."""
        target = Path(path)
        if not target.is_absolute():
            target = artifacts_dir() / target
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(self.driver.get_screenshot_as_png())
        return target

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        try:
            self.driver.quit()
        finally:
            self._dead_proxy.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
