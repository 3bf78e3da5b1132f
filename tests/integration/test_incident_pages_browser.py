"""The incident pages in a real headless Chromium (Debian's, through chromedriver; tests/browser.py
closes the network to everything but this machine and records every request): the report's pages
for a leaf down, a PFC storm, a rack's cooling and a PSU render with the root outlined among the
sick entities and sparklines with samples, no console error, nothing fetched from outside; and the
page a running `aiops run --kafka --api-port` serves for a live incident acknowledges with the
token typed into it and is refused without. Screenshots go to tests/artifacts/."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from show.report import write_report
from tests.browser import Browser, artifacts_dir
from tests.faults.daemons import reaped, replay
from tests.faults.test_notify_kill import _free_port, _get
from tests.show_run import KINDS, ShownRun, shown_run  # noqa: F401 (a fixture)
from vocab.settings import KafkaSettings

pytestmark = pytest.mark.services

TOKEN = "page-test-token"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser() as b:
        yield b


def _check_page(b: Browser, root: str, shot: str) -> dict[str, Any]:
    assert b.console_errors() == []
    assert b.outside_requests() == []
    found: dict[str, Any] = b.execute(
        """const root = document.querySelector('svg.topology g.entity.root');
        return {root: root && root.dataset.entity,
                rootSick: !!(root && root.classList.contains('sick')),
                sick: document.querySelectorAll('svg.topology g.entity.sick').length,
                sparks: [...document.querySelectorAll('svg.spark')].map(s => Number(s.dataset.points)),
                action: document.getElementById('action').textContent,
                drawn: [...document.querySelectorAll('svg.topology rect')]
                    .filter(r => r.getBBox().width > 0).length};"""
    )
    assert found["root"] == root and found["rootSick"], found
    assert found["drawn"] >= found["sick"] >= 1
    assert found["sparks"] and max(found["sparks"]) > 0, found
    assert found["action"].startswith("Do:") and len(found["action"]) > 10
    b.screenshot(artifacts_dir() / shot)
    return found


@pytest.mark.parametrize("kind", KINDS)
def test_report_pages_render_in_chromium(
    browser: Browser,
    shown_run: ShownRun,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
    kind: str,
) -> None:
    out = tmp_path_factory.getbasetemp() / "browser-report"
    if not (out / "index.html").is_file():
        write_report(shown_run.out, out, shown_run.input / "truth.jsonl")
    incident = shown_run.of_kind(kind)
    browser.open((out / "incidents" / f"{incident['incident_id']}.html").as_uri())
    _check_page(browser, incident["root_cause"]["entity"], f"incident-{kind}.png")
    if kind == KINDS[0]:
        browser.open((out / "index.html").as_uri())
        assert browser.console_errors() == [] and browser.outside_requests() == []
        marks = browser.execute("return document.querySelectorAll('svg.timeline rect.fault').length")
        assert marks == len(shown_run.truth)
        browser.screenshot(artifacts_dir() / "report-index.png")


def test_the_daemon_serves_a_live_incident_page_that_acknowledges_with_the_token(
    browser: Browser, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    r = replay(kafka_settings, tmp_path)
    r.env["AIOPS_API_TOKEN"] = TOKEN
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with reaped() as track:
        gen = track(r.stream())
        daemon = track(r.aiops(*r.daemon, "--api-port", str(port)))
        deadline = time.monotonic() + 180
        live: list[dict[str, Any]] = []
        while not live and time.monotonic() < deadline:
            with contextlib.suppress(OSError):  # not serving yet
                live = [
                    i for i in _get(f"{base}/api/incidents?status=open") if i["root_cause"]["kind"] != "gpu_straggler"
                ]
            if not live:
                time.sleep(1)
        assert live, "no open incident within 3 minutes"
        incident = live[0]
        browser.open(f"{base}/incidents/{incident['incident_id']}")
        _check_page(browser, incident["root_cause"]["entity"], "incident-live.png")

        browser.find_css("#ack").click()  # no token typed: refused
        status = browser.wait_until("return document.getElementById('result').dataset.status || null")
        assert status == "401"
        assert _get(f"{base}/api/incidents/{incident['incident_id']}")["acknowledged"] is None

        browser.find_css("#token").send_keys(TOKEN)
        browser.find_css("#by").clear()
        browser.find_css("#by").send_keys("page-test")
        browser.execute("document.getElementById('result').dataset.status = ''")
        browser.find_css("#ack").click()
        status = browser.wait_until("return document.getElementById('result').dataset.status || null")
        assert status == "200"
        acked = _get(f"{base}/api/incidents/{incident['incident_id']}")["acknowledged"]
        assert acked is not None and acked["by"] == "page-test"
        assert TOKEN not in browser.execute(
            "return document.documentElement.outerHTML.replace(document.getElementById('token').value, '')"
        )
        assert all(u.startswith(base) or u.startswith(("data:", "about:")) for u in browser.requests())
        os.kill(daemon.pid, signal.SIGTERM)
        daemon.communicate(timeout=120)
        gen.kill()
        gen.communicate()
