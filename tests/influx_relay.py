"""A relay in front of the real InfluxDB that answers some writes itself (an injected fault) and
forwards the rest, so every byte that lands is really stored."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests


class FaultyRelay:
    """`refuse()` is asked for every write: a status to answer with, or None to forward."""

    def __init__(self, target: str, refuse: Callable[[], int | None]) -> None:
        self.forwarded = 0
        self.refused = 0
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status = refuse()
                if status is not None:
                    relay.refused += 1
                    payload = b'{"error":"injected fault"}'
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                answer = requests.post(target + self.path, data=body, headers=headers, timeout=30)
                relay.forwarded += 1
                self.send_response(answer.status_code)
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
