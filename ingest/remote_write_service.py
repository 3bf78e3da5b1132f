"""`aiops ingest --remote-write HOST:PORT`: Prometheus remote-write over HTTP to the telemetry topic
(ingest/remote_write.py says what is mapped and how).

POST /api/v1/write (Prometheus's own receiver's path; any path is taken). Answers, as the
remote-write spec asks of a receiver: 204 once the lines and dead letters are on Kafka (acks=all);
401 without the configured credentials (checked first: not one byte of the body is read); 400 for
a body that is not a remote-write request or decodes to more than a request's bounds
(ingest/remote_write.py Limits), 411 without a Content-Length, 413 over the body limit (read no
further), 415 for another encoding or type, 408 for a body not sent within the read timeout (none
of those is retried by Prometheus, and retrying would not help); 503 when Kafka did not take it,
or while every body slot is taken (retried by Prometheus, so nothing is lost while the broker is
away or the door is busy). A request's lines are on the topic before its 204, so what Prometheus
was told is stored, is.

The door is closed by default (docs/collectors.md, "Prometheus sites"): it binds loopback unless
told an address, and refuses to start on any other address without credentials and TLS unless run
with `open_door` (--remote-write-open), which it logs as a warning. Memory is bounded by
MAX_CONNECTIONS connections (each holds a thread and at most a header), MAX_BODIES bodies read
and decoded at once (each at most max_body_bytes + its decompressed bound + its parsed objects),
and time by IDLE_TIMEOUT_S per connection and READ_TIMEOUT_S per body.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import http.server
import ipaddress
import logging
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import SecretStr

from ingest.kafka import KafkaDeadLetterSink, KafkaIOError, TelemetryProducer, ensure_topics, until_reachable
from ingest.messages import MAX_MESSAGE_BYTES
from ingest.remote_write import (
    MAX_BODY_BYTES,
    MAX_DECOMPRESSED_BYTES,
    Limits,
    RemoteWriteError,
    RequestTooLargeError,
    decode_request,
)
from vocab.settings import KafkaSettings

log = logging.getLogger(__name__)

# How long a request waits for Kafka to take its records before answering 503 (Prometheus then
# retries with backoff); an operational choice well under Prometheus's remote_timeout (30 s).
PUBLISH_TIMEOUT_S = 20.0
# A node's lines of one request go out in messages of at most this much (a tenth of what the
# broker takes), so that one request of a very large node never meets the broker's limit.
MESSAGE_BYTES = MAX_MESSAGE_BYTES // 10
# A whole body must arrive within this: Prometheus gives up on a request after its remote_timeout
# (30 s by default) and sends it again, so a body still arriving after 30 s is one nobody waits
# for (30 half-sent 16 MiB bodies held 450 MB with no end before this bound).
READ_TIMEOUT_S = 30.0
# A connection with nothing to read for this long is closed (between requests and inside one):
# Prometheus sends every batch_send_deadline (1 s shipped, 5 s default) while it has samples, and
# reconnects on its own after a close.
IDLE_TIMEOUT_S = 60.0
# Connections at once: Prometheus opens one per shard, max_shards 50 by default (2.42); 64 leaves
# room for a second Prometheus (HA pairs). Beyond it a connection is closed at once (a network
# error to Prometheus, which retries).
MAX_CONNECTIONS = 64
# Bodies read and decoded at once: each may hold its body, its decompressed bytes and its objects
# (16 + 64 MiB + tens of MB at the defaults), so 4 keep the door under ~700 MB at worst; a
# request waits BODY_WAIT_S for a slot, then gets 503 (retried). Publishing to Kafka is one at a
# time anyway, so more slots would only hold more memory.
MAX_BODIES = 4
BODY_WAIT_S = 5.0
# The TLS handshake of a new connection must finish within this (a client that opens and sends
# nothing holds a connection slot until then).
HANDSHAKE_TIMEOUT_S = 10.0


def _chunks(lines: list[bytes], limit: int = MESSAGE_BYTES) -> list[bytes]:
    out: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for line in lines:
        if current and size + len(line) + 1 > limit:
            out.append(b"\n".join(current) + b"\n")
            current, size = [], 0
        current.append(line)
        size += len(line) + 1
    if current:
        out.append(b"\n".join(current) + b"\n")
    return out


@dataclass(frozen=True)
class Credentials:
    """What a request must carry, as Prometheus's remote_write sends it: `authorization:
    {credentials_file}` -> `Authorization: Bearer <token>`, `basic_auth` -> `Authorization: Basic
    base64(user:password)`. Either one accepted when both are set."""

    token: SecretStr | None = None
    basic: tuple[str, SecretStr] | None = None  # (username, password)

    def __post_init__(self) -> None:
        if self.token is not None and not self.token.get_secret_value():
            raise ValueError("an empty remote-write token")

    @property
    def required(self) -> bool:
        return self.token is not None or self.basic is not None

    def accepts(self, header: str | None) -> bool:
        if not self.required:
            return True
        if not header:
            return False
        scheme, _, given = header.strip().partition(" ")
        given = given.strip()
        if scheme.lower() == "bearer" and self.token is not None:
            # compare_digest raises on a str that is not ASCII: compare bytes
            return hmac.compare_digest(given.encode(), self.token.get_secret_value().encode())
        if scheme.lower() == "basic" and self.basic is not None:
            try:
                pair = base64.b64decode(given, validate=True)
            except (binascii.Error, ValueError):
                return False
            user, password = self.basic
            return hmac.compare_digest(pair, f"{user}:{password.get_secret_value()}".encode())
        return False

    @property
    def challenge(self) -> str:
        return "Bearer" if self.token is not None else 'Basic realm="aiops remote write"'


def read_secret(path: Path) -> SecretStr:
    """A secret from a file (its first line, without the newline), as Prometheus's
    credentials_file and password_file hold them."""
    text = path.read_text(encoding="utf-8").splitlines()
    value = text[0].strip() if text else ""
    if not value:
        raise ValueError(f"{path}: empty; put the secret on its first line")
    return SecretStr(value)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def start_refusal(host: str, credentials: Credentials, tls: bool, open_door: bool) -> str | None:
    """Why the door must not start as configured, or None. Loopback may run without credentials
    (only this host reaches it); any other address needs credentials and TLS (a bearer token in
    clear on the cluster network is anyone's), unless the operator said `open_door`."""
    if is_loopback(host) or open_door:
        return None
    missing = [what for what, ok in (("credentials", credentials.required), ("TLS", tls)) if not ok]
    if not missing:
        return None
    return (
        f"remote write on {host}, not loopback, without {' and '.join(missing)}: anyone who reaches it could "
        "write telemetry (a forged XID becomes an incident); give --remote-write-token-file (or "
        "AIOPS_REMOTE_WRITE_TOKEN, or --remote-write-basic-auth-file) and "
        "--remote-write-tls-cert/--remote-write-tls-key, "
        "or --remote-write-open to run it open on purpose"
    )


class _ReadTimeoutError(Exception):
    pass


def _read_body(rfile: BinaryIO, sock: socket.socket, length: int, timeout_s: float, idle_s: float) -> bytes:
    """`length` bytes within `timeout_s` in all (a socket timeout alone bounds each wait, not a
    body dripped a byte at a time). Grows with what arrives: a half-sent body holds only its half."""
    deadline = time.monotonic() + timeout_s
    buf = bytearray()
    try:
        while len(buf) < length:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _ReadTimeoutError(f"{len(buf):,} of {length:,} bytes in {timeout_s:g} s")
            sock.settimeout(min(left, idle_s))
            chunk = rfile.read1(min(1 << 16, length - len(buf)))  # type: ignore[attr-defined]
            if not chunk:
                raise _ReadTimeoutError(f"the connection closed after {len(buf):,} of {length:,} bytes")
            buf += chunk
    except (TimeoutError, OSError) as exc:
        raise _ReadTimeoutError(f"{len(buf):,} of {length:,} bytes, then {type(exc).__name__}") from None
    finally:
        sock.settimeout(idle_s)
    return bytes(buf)


class _Server(http.server.ThreadingHTTPServer):
    """ThreadingHTTPServer with at most `max_connections` connections, TLS per connection (the
    handshake in the connection's thread, not the accepting one) and quiet connection errors."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[http.server.BaseHTTPRequestHandler],
        max_connections: int,
        tls: ssl.SSLContext | None,
        on_refused: Callable[[], None],
    ) -> None:
        # listen()'s backlog: socketserver's 5 made the kernel drop the 6th connection of a burst
        # (Prometheus opens one per shard at once); the connection cap is what bounds them
        self.request_queue_size = max_connections
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(max_connections)
        self._tls = tls
        self._on_refused = on_refused

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        if self._tls is not None:
            sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._on_refused()
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except RuntimeError:  # no thread could be started (memory): this connection is refused
            self._slots.release()
            self._on_refused()
            log.warning("remote write: no thread for a connection from %s; closed", client_address)
            self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("remote write: connection from %s ended with an error", client_address, exc_info=True)


class RemoteWriteReceiver:
    """The HTTP server and its Kafka producer. `counts` is what it did, for the log and the CLI."""

    def __init__(
        self,
        kafka: KafkaSettings,
        host: str,
        port: int,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
        producer: TelemetryProducer | None = None,
        credentials: Credentials | None = None,
        tls: ssl.SSLContext | None = None,
        open_door: bool = False,
        limits: Limits | None = None,
        read_timeout_s: float = READ_TIMEOUT_S,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        max_bodies: int = MAX_BODIES,
        body_wait_s: float = BODY_WAIT_S,
    ) -> None:
        self.credentials = credentials or Credentials()
        if refusal := start_refusal(host, self.credentials, tls is not None, open_door):
            raise ValueError(refusal)
        if not is_loopback(host) and not (self.credentials.required and tls is not None):
            log.warning(
                "REMOTE WRITE DOOR OPEN on %s (--remote-write-open): %s; anyone who reaches it can write telemetry",
                host,
                "no credentials" if not self.credentials.required else "no TLS: credentials cross the network in clear",
            )
        self.kafka = kafka
        self.max_body_bytes = max_body_bytes
        self.max_decompressed_bytes = max_decompressed_bytes
        self.limits = limits or Limits()
        self.read_timeout_s = read_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.body_wait_s = body_wait_s
        self.tls = tls is not None
        self.producer = producer or TelemetryProducer(kafka.bootstrap, client_id="aiops-remote-write")
        self.deadletters = KafkaDeadLetterSink(self.producer, kafka.deadletter_topic)
        self.counts: Counter[str] = Counter()
        self.last_request = time.monotonic()
        self._lock = threading.Lock()
        self._publish = threading.Lock()
        self._bodies = threading.BoundedSemaphore(max_bodies)
        self._httpd = _Server(
            (host, port), self._handler(), max_connections, tls, lambda: self._count(connections_refused=1)
        )
        self.port = int(self._httpd.server_address[1])
        self.address = f"{host}:{self.port}"

    def _count(self, **kw: int) -> None:
        with self._lock:
            self.counts.update(kw)

    def handle(self, headers: dict[str, str], read: Callable[[int], bytes]) -> tuple[int, str]:
        """One request: (status, reason text). `read(n)` reads the body; it raises _ReadTimeoutError
        when the body does not come in time. Every refusal before the body is read leaves it unread."""
        self.last_request = time.monotonic()
        self._count(requests=1)
        if not self.credentials.accepts(headers.get("authorization")):
            self._count(unauthorized=1)
            return 401, "valid credentials are required (Authorization: Bearer or Basic)"
        length_text = headers.get("content-length")
        if length_text is None or not length_text.isdigit():
            self._count(refused=1)
            return 411, "a Content-Length is required"
        length = int(length_text)
        if length > self.max_body_bytes:
            self._count(refused=1)
            return 413, f"body of {length:,} bytes (the limit is {self.max_body_bytes:,})"
        encoding = headers.get("content-encoding", "").lower()
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if encoding != "snappy" or ctype != "application/x-protobuf":
            self._count(refused=1)
            return 415, "remote-write 1.0 is Content-Encoding: snappy, Content-Type: application/x-protobuf"
        if not self._bodies.acquire(timeout=self.body_wait_s):
            self._count(busy=1)
            return 503, f"every body slot is taken; retry (at most {self._bodies._initial_value} at once)"  # type: ignore[attr-defined]
        try:
            return self._decode_and_publish(length, read)
        finally:
            self._bodies.release()

    def _decode_and_publish(self, length: int, read: Callable[[int], bytes]) -> tuple[int, str]:
        try:
            body = read(length)
        except _ReadTimeoutError as exc:
            self._count(read_timeouts=1)
            return 408, f"the body did not arrive: {exc}"
        try:
            mapped = decode_request(body, self.max_decompressed_bytes, self.limits)
        except RequestTooLargeError as exc:
            self._count(refused=1, refused_bounds=1)
            return 400, f"request over a bound: {exc}"
        except RemoteWriteError as exc:
            self._count(refused=1)
            return 400, f"not a remote-write request: {exc}"
        del body
        try:
            with self._publish:  # one request's flush covers its own records
                for node, lines in mapped.lines.items():
                    for message in _chunks(lines):
                        self.producer.send_raw(self.kafka.telemetry_topic, message, key=node.encode())
                self.deadletters.add(mapped.deadletters)
                self.producer.flush(timeout_s=PUBLISH_TIMEOUT_S)
        except KafkaIOError as exc:
            self.producer.failed = 0  # Prometheus sends the request again
            self._count(unavailable=1)
            return 503, f"Kafka did not take the request: {exc}"
        self._count(**dict(mapped.counts), deadlettered=len(mapped.deadletters))
        return 204, ""

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = receiver.idle_timeout_s  # StreamRequestHandler.setup sets it on the socket

            def setup(self) -> None:
                if isinstance(self.request, ssl.SSLSocket):
                    self.request.settimeout(min(HANDSHAKE_TIMEOUT_S, receiver.idle_timeout_s))
                    self.request.do_handshake()  # an error ends the connection (handle_error, quiet)
                super().setup()

            def do_POST(self) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                read_all = False

                def read(n: int) -> bytes:
                    nonlocal read_all
                    body = _read_body(
                        self.rfile,  # type: ignore[arg-type]
                        self.connection,
                        n,
                        receiver.read_timeout_s,
                        receiver.idle_timeout_s,
                    )
                    read_all = True
                    return body

                status, text = receiver.handle(headers, read)
                if status >= 400:
                    log.warning("remote write from %s: %d %s", self.client_address[0], status, text)
                body = text.encode() + b"\n" if text else b""
                try:
                    self.send_response(status)
                    if not read_all:  # the body was not (wholly) read: the connection cannot be reused
                        self.send_header("Connection", "close")
                        self.close_connection = True
                    if status == 401:
                        self.send_header("WWW-Authenticate", receiver.credentials.challenge)
                    if body:
                        self.send_header("Content-Type", "text/plain; charset=utf-8")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if body:
                        self.wfile.write(body)
                except OSError:
                    self.close_connection = True  # the client went away; nothing to tell it

            def log_message(self, format: str, *args: object) -> None:
                log.debug(format, *args)

        return Handler

    def serve(
        self, should_stop: Callable[[], bool], idle_stop_s: float | None = None, stats_every_s: float = 60.0
    ) -> None:
        thread = threading.Thread(target=self._httpd.serve_forever, name="remote-write", daemon=True)
        thread.start()
        log.info(
            "remote write: POST %s://%s/api/v1/write (%s) -> %s (dead letters: %s)",
            "https" if self.tls else "http",
            self.address,
            "credentials required" if self.credentials.required else "no credentials",
            self.kafka.telemetry_topic,
            self.kafka.deadletter_topic,
        )
        last_stats = time.monotonic()
        try:
            while not should_stop():
                time.sleep(0.2)
                now = time.monotonic()
                if idle_stop_s is not None and now - self.last_request > idle_stop_s:
                    break
                if now - last_stats >= stats_every_s:
                    last_stats = now
                    log.info("remote write %s", dict(self.counts))
        finally:
            self._httpd.shutdown()
            self._httpd.server_close()
            log.info("remote write %s", dict(self.counts))

    def close(self) -> None:
        self.producer.close()


def server_tls(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context from PEM files (TLS 1.2 at least: what Prometheus's tls_config speaks)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


def run_remote_write(
    kafka: KafkaSettings,
    listen: str,
    should_stop: Callable[[], bool],
    *,
    idle_stop_s: float | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    credentials: Credentials | None = None,
    tls: ssl.SSLContext | None = None,
    open_door: bool = False,
    **bounds: Any,
) -> Counter[str]:
    """Serve until `should_stop`. `bounds`: the receiver's read_timeout_s, idle_timeout_s,
    max_connections, max_bodies, body_wait_s, limits (tests shorten them)."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    credentials = credentials or Credentials()
    if refusal := start_refusal(host, credentials, tls is not None, open_door):
        raise ValueError(refusal)  # before Kafka is waited for: a refusal is immediate
    until_reachable(
        lambda: ensure_topics(kafka.bootstrap, [kafka.telemetry_topic, kafka.deadletter_topic]), should_stop
    )
    producer = until_reachable(lambda: TelemetryProducer(kafka.bootstrap, client_id="aiops-remote-write"), should_stop)
    receiver = RemoteWriteReceiver(
        kafka,
        host,
        int(port),
        max_body_bytes=max_body_bytes,
        max_decompressed_bytes=max(MAX_DECOMPRESSED_BYTES, 4 * max_body_bytes),
        producer=producer,
        credentials=credentials,
        tls=tls,
        open_door=open_door,
        **bounds,
    )
    try:
        receiver.serve(should_stop, idle_stop_s)
    finally:
        receiver.close()
    return receiver.counts
