"""The incident pages in a real headless Chromium (Debian's, through chromedriver; tests/browser.py
closes the network to everything but this machine and records every request): the report's pages
for a leaf down, a PFC storm, a rack's cooling and a PSU render with the root outlined among the
sick entities and sparklines with samples, no console error, nothing fetched from outside; and the
page a running `aiops run --kafka --api-port` serves for a live incident acknowledges with the
token typed into it and is refused without. Screenshots go to tests/artifacts/.

And for every kind the generator injects (issue 49's acceptance), the page of its incident, served
over HTTP with the daemon's Content-Security-Policy (the browser enforces it: a style or script the
policy does not name is a console error): the root is drawn in the SVG, the caption's counts are
what is drawn, and at 1400 px and at 414 px (a phone) no element runs past the viewport's right
edge (what is wider scrolls inside a card that fits), and on the phone the picture keeps its size
rather than shrinking to a thumbnail. The 1400 px and 414 px screenshots are docs/img's pictures."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from show.page import PAGE_CSP
from show.report import write_report
from tests.browser import Browser, artifacts_dir
from tests.faults.daemons import reaped, replay
from tests.faults.test_notify_kill import _free_port, _get
from tests.show_run import ALL_KINDS, KINDS, ShownRun, all_kinds_run, shown_run  # noqa: F401 (fixtures)
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
        # docs/pages.md's picture of the report's timeline: the linked SVG as the browser draws it
        DOCS_IMG.mkdir(exist_ok=True)
        browser.find_css("svg.timeline").screenshot(str(DOCS_IMG / "report-timeline.png"))


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


# ------------------------------------------------------------------ every kind, both widths

DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
WIDTHS = ((1400, 1000, False), (414, 896, True))  # a desktop window; a phone (iPhone 11's CSS viewport)
OVERFLOW = """
const W = document.documentElement.clientWidth, bad = [];
for (const el of document.body.querySelectorAll('*')) {
  const r = el.getBoundingClientRect();
  if (r.width === 0 || r.right <= W + 1) continue;
  let a = el.parentElement, scrolls = false;  // inside a box that scrolls and itself fits: not overflow
  while (a && a !== document.body) {
    const ox = getComputedStyle(a).overflowX;
    if ((ox === 'auto' || ox === 'scroll') && a.getBoundingClientRect().right <= W + 1) { scrolls = true; break; }
    a = a.parentElement;
  }
  if (!scrolls) {
    const cls = typeof el.className === 'string' ? el.className : el.getAttribute('class');
    bad.push(`${el.tagName}${el.id ? '#' + el.id : ''}${cls ? '.' + cls : ''} right=${Math.round(r.right)}`);
  }
}
const svg = document.querySelector('svg.topology');
return {width: W, scroll: document.documentElement.scrollWidth, bad: bad.slice(0, 8),
        svgDrawn: svg ? svg.getBoundingClientRect().width : 0, svgWidth: svg ? Number(svg.getAttribute('width')) : 0};
"""
PICTURE = """
const svg = document.querySelector('svg.topology'), cap = document.getElementById('topology-caption');
const root = svg.querySelector('g.entity.root');
return {root: root && root.dataset.entity, boxes: svg.querySelectorAll('g.entity').length,
        sick: svg.querySelectorAll('g.entity.sick').length,
        more: [...svg.querySelectorAll('text.more')].map(t => Number(t.dataset.hidden)),
        data: {...cap.dataset}, caption: cap.textContent};
"""


BROKEN_WORDS = """
const broken = [];
for (const cell of document.querySelectorAll('td, th')) {
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const m of node.textContent.matchAll(/\\S+/g)) {
      // a number, or a word of letters that fits a phone's column: never broken across lines
      if (!/^[0-9.,%]+$/.test(m[0]) && !/^[A-Za-z]{1,16}$/.test(m[0])) continue;
      const r = document.createRange();
      r.setStart(node, m.index);
      r.setEnd(node, m.index + m[0].length);
      if (new Set([...r.getClientRects()].map(x => Math.round(x.top))).size > 1) broken.push(m[0]);
    }
  }
}
return broken.slice(0, 10);
"""


@pytest.mark.parametrize(("width", "height", "mobile"), WIDTHS)
def test_the_incident_list_breaks_no_word_and_no_number(
    wide_again: Browser, served_report: str, width: int, height: int, mobile: bool
) -> None:
    """The list broke words at 1400 px and stood "256" as three lines at 414 px: every cell could
    break anywhere (issue 66). Failed before the fix."""
    b = wide_again
    b.resize(width, height, mobile=mobile)
    b.open(f"{served_report}/incidents.html")
    assert b.console_errors() == []
    rows = b.execute("return document.querySelectorAll('tbody tr, table tr').length")
    assert rows > 1
    assert b.execute(BROKEN_WORDS) == [], width
    b.screenshot(artifacts_dir() / f"incident-list-{width}.png")


class _CspHandler(SimpleHTTPRequestHandler):
    """The report's files, each with the policy the daemon sends with its pages."""

    def end_headers(self) -> None:
        self.send_header("Content-Security-Policy", PAGE_CSP)
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def served_report(all_kinds_run: ShownRun, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:  # noqa: F811
    out = tmp_path_factory.mktemp("all-kinds-report")
    write_report(all_kinds_run.out, out, all_kinds_run.input / "truth.jsonl")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_CspHandler, directory=str(out)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def wide_again(browser: Browser) -> Iterator[Browser]:
    yield browser
    browser.resize(1400, 1000)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_every_kinds_page_draws_its_root_counts_what_it_draws_and_fits(
    wide_again: Browser,
    all_kinds_run: ShownRun,  # noqa: F811
    served_report: str,
    kind: str,
) -> None:
    b = wide_again
    incident = all_kinds_run.of_fault(kind)
    assert incident is not None, f"no incident for the injected {kind}"
    for width, height, mobile in WIDTHS:
        b.resize(width, height, mobile=mobile)
        b.open(f"{served_report}/incidents/{incident['incident_id']}.html")
        assert [e for e in b.console() if "Content Security Policy" in e.message] == []
        assert b.console_errors() == [] and b.outside_requests() == []
        # the root is drawn, outlined, in the SVG
        pic: dict[str, Any] = b.execute(PICTURE)
        assert pic["root"] == incident["root_cause"]["entity"], pic
        # the caption's counts are what is drawn
        data = {k: int(v) for k, v in pic["data"].items()}
        assert (data["boxes"], data["sickBoxes"]) == (pic["boxes"], pic["sick"]), pic
        caption = " ".join(pic["caption"].split())
        assert f"Drawn: {pic['boxes']} entities, {pic['sick']} of them sick" in caption, caption
        listed = re.search(r"standing for (\d+) of the (\d+) affected entities listed", caption)
        assert listed is not None and int(listed.group(1)) == data["drawn"], caption
        assert data["drawn"] + data["hidden"] + data["outside"] == int(listed.group(2)), caption
        assert (data["hidden"] > 0) <= (sum(pic["more"]) >= data["hidden"]), pic  # left out: said in the rows
        # nothing runs past the right edge; the picture scrolls, it does not shrink
        fit: dict[str, Any] = b.execute(OVERFLOW)
        assert fit["scroll"] <= fit["width"] and fit["bad"] == [], (width, fit)
        if mobile:  # on a phone the picture keeps its size and scrolls in its card: no thumbnail
            assert fit["svgDrawn"] >= fit["svgWidth"] - 1, (width, fit)
        shot = b.screenshot(artifacts_dir() / f"incident-{kind}-{width}.png")
        if kind == "pfc_storm":  # the pictures of docs/pages.md and the README
            DOCS_IMG.mkdir(exist_ok=True)
            shutil.copyfile(shot, DOCS_IMG / ("incident-page.png" if width == 1400 else "incident-page-phone.png"))
