"""The API server over HTTP: configuration, a client that lists and watches.

The documentation each rule follows: context/scheduler/kubernetes/objects.py."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from context.scheduler.kubernetes.objects import (
    SERVICE_ACCOUNT,
    ApiError,
    KubernetesFormatError,
    ResourceExpiredError,
)
from vocab.bounds import (
    MAX_KUBERNETES_BYTES,
    MAX_WATCH_LINE_BYTES,
    BoundError,
)
from vocab.bounds import loads as bounded_loads

log = logging.getLogger(__name__)


# --- the API server over HTTP ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApiConfig:
    """Where the API server is and how to prove who we are: a bearer token read from its file at
    every request (projected service-account tokens rotate), a CA file or `insecure` for https."""

    server: str  # "https://10.96.0.1:443"; http for a `kubectl proxy` or a test
    token_file: Path | None = None
    ca_file: Path | None = None
    insecure: bool = False
    request_timeout_s: float = 60.0

    @classmethod
    def in_cluster(cls) -> ApiConfig:
        """The API server as a pod sees it: the kubernetes service's address from the environment
        and the service account's token and CA."""
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", SERVICE_ACCOUNT / "token", SERVICE_ACCOUNT / "ca.crt")


def _status_message(code: int, body: bytes) -> ApiError:
    """The error a `Status` body (or a bare one) stands for; 410 is ResourceExpiredError."""
    try:
        doc = json.loads(body)
        message = str(doc.get("message") or doc.get("reason")) if isinstance(doc, dict) else ""
    except ValueError:
        message = ""
    message = message or body.decode("utf-8", "replace").strip()[:200] or http.client.responses.get(code, "")
    return ResourceExpiredError(code, message) if code == 410 else ApiError(code, message)


class ApiClient:
    """GETs against the API server: JSON bodies, and watch streams read line by line (the
    server's chunked newline-delimited JSON). `close` cuts every open connection, which wakes a
    read blocked on a quiet watch."""

    def __init__(self, config: ApiConfig) -> None:
        url = urlsplit(config.server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"API server {config.server!r} is not an http(s) URL")
        self.config = config
        self._https = url.scheme == "https"
        self._host, self._port, self._prefix = url.hostname, url.port, url.path.rstrip("/")
        self._tls: ssl.SSLContext | None = None
        if self._https:
            self._tls = ssl.create_default_context(cafile=str(config.ca_file) if config.ca_file else None)
            if config.insecure:
                self._tls.check_hostname = False
                self._tls.verify_mode = ssl.CERT_NONE
        self._guard = threading.Lock()
        self._open: set[http.client.HTTPConnection] = set()
        self._closed = False

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "aiops-gpu (context.scheduler.kubernetes)"}
        if self.config.token_file is not None:
            token = self.config.token_file.read_text(encoding="utf-8").strip()
            if not token:  # being rewritten: an empty bearer would be refused (or worse, anonymous)
                raise OSError(f"the token file {self.config.token_file} is empty")
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        with self._guard:
            if self._closed:
                raise ConnectionAbortedError("the API client is closed")
            conn: http.client.HTTPConnection
            if self._https:
                conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._tls)
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
            self._open.add(conn)
            return conn

    def _release(self, conn: http.client.HTTPConnection) -> None:
        with self._guard:
            self._open.discard(conn)
        conn.close()

    @contextlib.contextmanager
    def _get(self, path: str, query: Mapping[str, str], timeout: float) -> Iterator[http.client.HTTPResponse]:
        conn = self._connect(timeout)
        try:
            conn.connect()
            with self._guard:  # closed while connecting: close() saw no socket to cut
                if self._closed:
                    raise ConnectionAbortedError("the API client is closed")
            conn.request("GET", f"{self._prefix}{path}?{urlencode(query)}", headers=self._headers())
            resp = conn.getresponse()
            if resp.status != 200:
                raise _status_message(resp.status, resp.read())
            yield resp
        finally:
            self._release(conn)

    def get_json(self, path: str, query: Mapping[str, str]) -> dict[str, Any]:
        with self._get(path, query, self.config.request_timeout_s) as resp:
            body = resp.read(MAX_KUBERNETES_BYTES + 1)  # a byte past the bound is enough to refuse it
        if len(body) > MAX_KUBERNETES_BYTES:
            raise KubernetesFormatError(
                f"GET {path}: a body over {MAX_KUBERNETES_BYTES >> 20} MB (page the list: limit/continue) "
                "[bound file_size]"
            )
        try:
            doc = bounded_loads(body, f"GET {path}")
        except BoundError as exc:
            raise KubernetesFormatError(str(exc)) from None
        except ValueError:
            raise KubernetesFormatError(f"GET {path}: the body is not JSON: {body[:80]!r}") from None
        if not isinstance(doc, dict):
            raise KubernetesFormatError(f"GET {path}: a JSON {type(doc).__name__}, not an object")
        return doc

    def send_json(
        self, method: str, path: str, body: Mapping[str, Any], content_type: str = "application/json"
    ) -> tuple[int, dict[str, Any]]:
        """A write (PATCH, POST): the body as JSON with the content type the API documents for it
        (a merge or strategic-merge patch names its own); the status and the JSON answer. A
        status the caller must act on (409 conflict, 429 an eviction a disruption budget refuses)
        comes back to it; other errors raise ApiError."""
        conn = self._connect(self.config.request_timeout_s)
        try:
            headers = {**self._headers(), "Content-Type": content_type}
            conn.request(method, f"{self._prefix}{path}", body=json.dumps(body).encode(), headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            self._release(conn)
        if resp.status >= 400 and resp.status not in (409, 429):
            raise _status_message(resp.status, raw)
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            raise KubernetesFormatError(f"{method} {path}: the body is not JSON: {raw[:80]!r}") from None
        return resp.status, doc if isinstance(doc, dict) else {}

    @contextlib.contextmanager
    def stream(self, path: str, query: Mapping[str, str], read_timeout: float) -> Iterator[Iterator[bytes]]:
        """The lines of a watch; the iterator ends when the server ends the stream and raises
        (http.client.IncompleteRead, OSError) when the connection is cut."""
        with self._get(path, query, read_timeout) as resp:
            # a line is read up to one byte past the bound: a longer one is refused by watch_event,
            # never held whole
            yield iter(lambda: resp.readline(MAX_WATCH_LINE_BYTES + 1), b"")

    def close(self) -> None:
        with self._guard:
            self._closed = True
            conns = list(self._open)
        for conn in conns:
            if conn.sock is not None:
                with contextlib.suppress(OSError):
                    conn.sock.shutdown(socket.SHUT_RDWR)
