"""The headless-browser harness (tests/browser.py) against small pages served from 127.0.0.1 and
from file://: it finds what a page's script drew in an inline SVG, reports the page's errors and
every request it made, keeps requests to the outside from leaving, and takes screenshots that are
PNGs of the window with the page in them."""

from __future__ import annotations

import functools
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.browser import NO_FAVICON, Browser, artifacts_dir, is_local

pytestmark = pytest.mark.services

OUTSIDE_SCRIPT = "https://cdn.example.com/x.js"
# TEST-NET-3, a documentation range; without the harness's blocks something on this network answered it
OUTSIDE_IMAGE = "http://203.0.113.1/x.png"
OUTSIDE_FETCH = "http://cdn.example.com/api/incidents"
OUTSIDE = (OUTSIDE_IMAGE, OUTSIDE_SCRIPT, OUTSIDE_FETCH)
# the harness's dead proxy refused them: they were never resolved or sent anywhere
REFUSED = "net::ERR_PROXY_CONNECTION_FAILED"


class Site:
    """A folder served over http on 127.0.0.1, remembering the paths asked for."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths: list[str] = []
        outer = self

        class Handler(SimpleHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.paths.append(self.path)
                super().do_GET()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def page(self, name: str, body: str, head: str = NO_FAVICON) -> str:
        (self.root / name).write_text(
            f"<!doctype html>\n<html><head><meta charset='utf-8'>{head}</head>\n<body>{body}</body></html>\n"
        )
        return f"{self.base}/{name}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    served = tmp_path / "site"
    served.mkdir()
    s = Site(served)
    yield s
    s.close()


@pytest.fixture
def browser() -> Iterator[Browser]:
    with Browser() as b:
        yield b


GPU_MAP = """
<svg id="map" width="300" height="120" viewBox="0 0 300 120" xmlns="http://www.w3.org/2000/svg">
  <circle id="gpu-07" cx="40" cy="60" r="20" fill="#2a2" data-state="ok"/>
</svg>
<script>
  const gpu = document.querySelector('#gpu-07');
  gpu.setAttribute('fill', '#d33');
  gpu.dataset.state = 'xid-79';
  const link = document.createElementNS('http://www.w3.org/2000/svg', 'line');
  link.setAttribute('class', 'nvlink');
  link.setAttribute('x1', '60'); link.setAttribute('x2', '200');
  link.setAttribute('y1', '60'); link.setAttribute('y2', '60');
  document.querySelector('#map').appendChild(link);
</script>
"""


def test_what_the_page_script_drew_in_an_inline_svg_is_found_by_css(site: Site, browser: Browser) -> None:
    url = site.page("map.html", GPU_MAP)
    browser.open(url)
    gpu = browser.find_css("svg#map circle#gpu-07")
    assert gpu.get_attribute("fill") == "#d33"
    assert gpu.get_attribute("data-state") == "xid-79"
    assert browser.find_css("svg#map line.nvlink").get_attribute("x2") == "200"
    assert browser.find_all_css("svg#map circle") == [gpu]
    assert browser.execute("return document.querySelectorAll('#map > *').length") == 2
    assert browser.requests() == [url]
    assert browser.outside_requests() == []
    assert browser.console_errors() == []
    assert site.paths == ["/map.html"]  # the data: icon link: no /favicon.ico


def test_a_page_without_the_data_icon_link_gets_the_favicon_404_as_a_console_error(
    site: Site, browser: Browser
) -> None:
    browser.open(site.page("bare.html", "<p>no icon link</p>", head=""))
    assert f"{site.base}/favicon.ico" in browser.requests()
    errors = browser.console_errors()
    assert len(errors) == 1 and "favicon.ico" in errors[0].message and "404" in errors[0].message


def test_an_uncaught_exception_and_console_error_are_console_errors(site: Site, browser: Browser) -> None:
    browser.open(site.page("broken.html", "<script>console.error('told-you'); null.boom42();</script>"))
    errors = browser.console_errors()
    assert [e.source for e in errors] == ["console-api", "javascript"], errors
    assert "told-you" in errors[0].message
    assert "Uncaught TypeError" in errors[1].message and "boom42" in errors[1].message
    assert browser.outside_requests() == []


def test_requests_to_the_outside_are_recorded_and_do_not_load(site: Site, browser: Browser) -> None:
    url = site.page(
        "leaky.html",
        f"""<script>window.failed = [];</script>
        <img id="logo" src="{OUTSIDE_IMAGE}" onerror="failed.push('img')" onload="failed.push('img loaded')">
        <script src="{OUTSIDE_SCRIPT}" onerror="failed.push('script')"></script>
        <script>fetch('{OUTSIDE_FETCH}').then(() => failed.push('fetch answered'), () => failed.push('fetch'));</script>
        """,
    )
    browser.open(url)
    assert sorted(browser.outside_requests()) == sorted(OUTSIDE)
    assert browser.requests()[0] == url
    # They failed in the browser, at once, without reaching anything: the page's handlers saw it.
    failures = browser.failures()
    assert {u: failures.get(u) for u in OUTSIDE} == dict.fromkeys(OUTSIDE, REFUSED), failures
    browser.wait_until("return window.failed.length >= 3")
    assert sorted(browser.execute("return window.failed")) == ["fetch", "img", "script"]
    assert browser.execute("const i = document.getElementById('logo'); return [i.complete, i.naturalWidth]") == [
        True,
        0,
    ]
    errors = [e.message for e in browser.console_errors()]
    assert any(OUTSIDE_IMAGE in m and "Failed to load resource" in m for m in errors), errors
    assert any(OUTSIDE_SCRIPT in m and "Failed to load resource" in m for m in errors), errors
    assert site.paths == ["/leaky.html"]


def test_a_file_page_loads_with_its_sibling_files(tmp_path: Path, browser: Browser) -> None:
    (tmp_path / "dot.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16"><circle cx="8" cy="8" r="8"/></svg>'
    )
    page = tmp_path / "report.html"
    page.write_text(
        f"<!doctype html><html><head>{NO_FAVICON}</head><body>{GPU_MAP}<img id='dot' src='dot.svg'></body></html>"
    )
    browser.open(page.as_uri())
    assert browser.find_css("circle#gpu-07").get_attribute("fill") == "#d33"
    assert browser.execute("const i = document.getElementById('dot'); return [i.complete, i.naturalWidth]") == [
        True,
        16,
    ]
    assert browser.requests() == [page.as_uri(), (tmp_path / "dot.svg").as_uri()]
    assert browser.outside_requests() == []
    assert browser.console_errors() == []


def test_a_screenshot_is_a_png_of_the_window_with_the_page_in_it(site: Site, browser: Browser) -> None:
    browser.open(
        site.page(
            "paint.html",
            "<div style='position:absolute;left:0;top:0;width:100px;height:100px;background:#ff8800'></div>",
            head=NO_FAVICON + "<style>html,body{margin:0;background:#123456}</style>",
        )
    )
    shot = browser.screenshot("test_browser_harness.png")
    assert shot == artifacts_dir() / "test_browser_harness.png"
    width, height, pixel = _read_png(shot.read_bytes())
    assert (width, height) == browser.window == (1400, 1000)
    assert pixel(50, 50) == (0xFF, 0x88, 0x00)
    assert pixel(700, 500) == pixel(width - 1, height - 1) == (0x12, 0x34, 0x56)


def test_aiops_test_artifacts_chooses_where_screenshots_go(
    site: Site, browser: Browser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIOPS_TEST_ARTIFACTS", str(tmp_path / "artifacts"))
    browser.open(site.page("p.html", "<p>x</p>"))
    shot = browser.screenshot("sub/p.png")
    assert shot == tmp_path / "artifacts" / "sub" / "p.png"
    assert shot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_a_machine_without_chromium_skips_saying_what_is_missing_and_what_installs_it() -> None:
    with pytest.raises(pytest.skip.Exception, match=r"chromium \(/nonexistent/chromium\) missing.*scripts/services up"):
        Browser(chromium=Path("/nonexistent/chromium"))


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("file:///tmp/report.html", True),
        ("data:,", True),
        ("about:blank", True),
        ("http://127.0.0.1:8123/incidents/1", True),
        ("http://localhost:8123/", True),
        ("http://127.0.0.1.nip.io/", False),
        ("https://cdn.example.com/x.js", False),
        ("http://203.0.113.1/x.png", False),
        ("http://10.0.0.7:8123/", False),
    ],
)
def test_is_local(url: str, local: bool) -> None:
    assert is_local(url) is local


def _read_png(data: bytes) -> tuple[int, int, Callable[[int, int], tuple[int, int, int]]]:
    """Check a PNG chunk by chunk (signature, CRCs, IHDR, IDAT, IEND), undo its row filters and
    return width, height and a pixel(x, y) -> (r, g, b) reader. 8-bit RGB or RGBA only."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, chunks = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        chunk, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(chunk + body) == crc, f"bad CRC in {chunk!r}"
        chunks.append((chunk, body))
        pos += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    raw = np.frombuffer(zlib.decompress(b"".join(body for chunk, body in chunks if chunk == b"IDAT")), np.uint8)
    assert raw.size == height * (width * bpp + 1)
    lines = raw.reshape(height, width * bpp + 1)
    image = np.zeros((height, width * bpp), np.uint8)
    prev = np.zeros(width * bpp, np.uint8)
    for y in range(height):
        kind, line = int(lines[y, 0]), lines[y, 1:]
        if kind == 0:
            row = line.copy()
        elif kind == 1:  # Sub: a running sum along each channel
            row = (np.cumsum(line.reshape(width, bpp), axis=0, dtype=np.int64) & 0xFF).astype(np.uint8).ravel()
        elif kind == 2:  # Up
            row = line + prev
        elif kind in (3, 4):  # Average, Paeth: byte by byte (rare in Chromium's screenshots)
            row = np.zeros_like(line)
            for i in range(width * bpp):
                a = int(row[i - bpp]) if i >= bpp else 0
                b, c = int(prev[i]), int(prev[i - bpp]) if i >= bpp else 0
                if kind == 3:
                    guess = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    guess = a if pa <= pb and pa <= pc else b if pb <= pc else c
                row[i] = (int(line[i]) + guess) & 0xFF
        else:
            raise AssertionError(f"row {y}: no PNG filter {kind}")
        image[y] = prev = row

    def pixel(x: int, y: int) -> tuple[int, int, int]:
        r, g, b = (int(v) for v in image[y, x * bpp : x * bpp + 3])
        return (r, g, b)

    return width, height, pixel
