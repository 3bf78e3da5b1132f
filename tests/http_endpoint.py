"""A local HTTP endpoint standing in for a chat service, an Alertmanager webhook receiver or any
webhook: it records each POST's JSON body and answers the codes of `plan` in turn, then
`default`. Chat services and Grafana cannot be reached from the tests; this can."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Endpoint:
    def __init__(self, path: str = "/hook", default: int = 200) -> None:
        self.bodies: list[Any] = []  # what it took (answered 2xx)
        self.requests = 0
        self.plan: list[int] = []
        self.default = default
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with outer._lock:
                    outer.requests += 1
                    code = outer.plan.pop(0) if outer.plan else outer.default
                    if 200 <= code < 300:
                        outer.bodies.append(json.loads(body))
                self.send_response(code)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
