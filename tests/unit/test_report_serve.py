"""`aiops report --serve`: the written report over HTTP from a head node, with the pages' policy,
no listing, loopback unless told otherwise."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from show.page import PAGE_CSP
from show.serve import DEFAULT_HOST, parse_address, serve_folder


def test_the_report_is_served_with_the_pages_policy_and_no_listing(tmp_path: Path) -> None:
    (tmp_path / "incidents").mkdir()
    (tmp_path / "index.html").write_text("<!doctype html><title>r</title>")
    (tmp_path / "incidents" / "inc-1.html").write_text("<!doctype html><title>i</title>")
    server = serve_folder(tmp_path, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with urllib.request.urlopen(f"{base}/incidents/inc-1.html", timeout=10) as r:
            assert r.status == 200 and r.headers["Content-Security-Policy"] == PAGE_CSP
            assert r.headers["X-Frame-Options"] == "DENY" and r.read().startswith(b"<!doctype html>")
        with pytest.raises(urllib.error.HTTPError) as listing:
            urllib.request.urlopen(f"{base}/incidents/", timeout=10)
        assert listing.value.code == 404
        listing.value.close()
        with pytest.raises(urllib.error.HTTPError) as outside:  # nothing above the folder
            urllib.request.urlopen(f"{base}/../../etc/passwd", timeout=10)
        assert outside.value.code == 404
        outside.value.close()
    finally:
        server.shutdown()
        server.server_close()


def test_a_folder_without_a_report_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no index\.html"):
        serve_folder(tmp_path, "127.0.0.1", 0)


@pytest.mark.parametrize(
    ("text", "address"),
    [("8000", (DEFAULT_HOST, 8000)), ("0.0.0.0:8000", ("0.0.0.0", 8000)), ("[::1]:8000", ("::1", 8000))],
)
def test_the_address_is_a_port_or_host_and_port_on_loopback_by_default(text: str, address: tuple[str, int]) -> None:
    assert parse_address(text) == address


@pytest.mark.parametrize("text", ["", "host:", "host:port", "70000", "-1"])
def test_an_address_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="PORT or HOST:PORT"):
        parse_address(text)
