"""Serving a written report from a head node: `aiops report ... --serve [HOST:]PORT`. A head node
has no desktop to `open index.html` on; an engineer reaches it through a browser (often through an
SSH tunnel), so the report's folder is served over HTTP as it is, with the policy the daemon sends
with its pages (show/page.py PAGE_CSP: the pages run nothing and fetch nothing but their own).

Loopback by default: a report names the cluster's nodes, jobs and faults, and whoever reaches the
port reads it; a site that wants it on the head node's network says so (`--serve 0.0.0.0:8000`).
Files only: no directory listing, GET and HEAD only (the standard handler answers 501 to the rest).
"""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from show.page import PAGE_CSP

DEFAULT_HOST = "127.0.0.1"


class _ReportHandler(SimpleHTTPRequestHandler):
    def end_headers(self) -> None:
        self.send_header("Content-Security-Policy", PAGE_CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Referrer-Policy", "no-referrer")
        super().end_headers()

    def list_directory(self, path: str | Path) -> None:  # type: ignore[override]
        self.send_error(404, "no listing: open index.html")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the command prints where it serves; a request log would drown it


def parse_address(text: str) -> tuple[str, int]:
    """`PORT` or `HOST:PORT` (ValueError says what is wrong)."""
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--serve takes PORT or HOST:PORT, not {text!r}")
    return (host.strip("[]") or DEFAULT_HOST), int(port)


def serve_folder(folder: Path, host: str, port: int) -> ThreadingHTTPServer:
    """A server of `folder`'s files, started in a daemon thread; `shutdown()` stops it."""
    if not (folder / "index.html").is_file():
        raise FileNotFoundError(f"{folder} holds no index.html: write the report first")
    server = ThreadingHTTPServer((host, port), functools.partial(_ReportHandler, directory=str(folder)))
    threading.Thread(target=server.serve_forever, name="aiops-report", daemon=True).start()
    return server


__all__ = ["DEFAULT_HOST", "parse_address", "serve_folder"]
