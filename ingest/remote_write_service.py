"""`aiops ingest --remote-write HOST:PORT`: Prometheus remote-write over HTTP to the telemetry topic
(ingest/remote_write.py says what is mapped and how).

POST /api/v1/write (Prometheus's own receiver's path; any path is taken). Answers, as the
remote-write spec asks of a receiver: 204 once the lines and dead letters are on Kafka (acks=all);
400 for a body that is not a remote-write request, 411 without a Content-Length, 413 over the
body limit (read no further), 415 for another encoding or type (none of those is retried by
Prometheus, and retrying would not help); 503 when Kafka did not take it (retried by Prometheus,
so nothing is lost while the broker is away). A request's lines are on the topic before its 204,
so what Prometheus was told is stored, is.
"""

from __future__ import annotations

import http.server
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

from ingest.kafka import KafkaDeadLetterSink, KafkaIOError, TelemetryProducer, ensure_topics, until_reachable
from ingest.messages import MAX_MESSAGE_BYTES
from ingest.remote_write import MAX_BODY_BYTES, MAX_DECOMPRESSED_BYTES, RemoteWriteError, decode_request
from vocab.settings import KafkaSettings

log = logging.getLogger(__name__)

# How long a request waits for Kafka to take its records before answering 503 (Prometheus then
# retries with backoff); an operational choice well under Prometheus's remote_timeout (30 s).
PUBLISH_TIMEOUT_S = 20.0
# A node's lines of one request go out in messages of at most this much (a tenth of what the
# broker takes), so that one request of a very large node never meets the broker's limit.
MESSAGE_BYTES = MAX_MESSAGE_BYTES // 10


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
    ) -> None:
        self.kafka = kafka
        self.max_body_bytes = max_body_bytes
        self.max_decompressed_bytes = max_decompressed_bytes
        self.producer = producer or TelemetryProducer(kafka.bootstrap, client_id="aiops-remote-write")
        self.deadletters = KafkaDeadLetterSink(self.producer, kafka.deadletter_topic)
        self.counts: Counter[str] = Counter()
        self.last_request = time.monotonic()
        self._lock = threading.Lock()
        self._publish = threading.Lock()
        self._httpd = http.server.ThreadingHTTPServer((host, port), self._handler())
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self.address = f"{host}:{self.port}"

    def _count(self, **kw: int) -> None:
        with self._lock:
            self.counts.update(kw)

    def handle(self, headers: dict[str, str], read: Callable[[int], bytes]) -> tuple[int, str]:
        """One request: (status, reason text)."""
        self.last_request = time.monotonic()
        self._count(requests=1)
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
        body = read(length)
        try:
            mapped = decode_request(body, self.max_decompressed_bytes)
        except RemoteWriteError as exc:
            self._count(refused=1)
            return 400, f"not a remote-write request: {exc}"
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

            def do_POST(self) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, text = receiver.handle(headers, self.rfile.read)
                if status >= 400:
                    log.warning("remote write from %s: %d %s", self.client_address[0], status, text)
                body = text.encode() + b"\n" if text else b""
                self.send_response(status)
                if status in (411, 413, 415):  # the body was not read: the connection cannot be reused
                    self.send_header("Connection", "close")
                    self.close_connection = True
                if body:
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if body:
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug(format, *args)

        return Handler

    def serve(
        self, should_stop: Callable[[], bool], idle_stop_s: float | None = None, stats_every_s: float = 60.0
    ) -> None:
        thread = threading.Thread(target=self._httpd.serve_forever, name="remote-write", daemon=True)
        thread.start()
        log.info(
            "remote write: POST http://%s/api/v1/write -> %s (dead letters: %s)",
            self.address,
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


def run_remote_write(
    kafka: KafkaSettings,
    listen: str,
    should_stop: Callable[[], bool],
    *,
    idle_stop_s: float | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Counter[str]:
    host, _, port = listen.rpartition(":")
    until_reachable(
        lambda: ensure_topics(kafka.bootstrap, [kafka.telemetry_topic, kafka.deadletter_topic]), should_stop
    )
    producer = until_reachable(lambda: TelemetryProducer(kafka.bootstrap, client_id="aiops-remote-write"), should_stop)
    receiver = RemoteWriteReceiver(
        kafka,
        host or "0.0.0.0",
        int(port),
        max_body_bytes=max_body_bytes,
        max_decompressed_bytes=max(MAX_DECOMPRESSED_BYTES, 4 * max_body_bytes),
        producer=producer,
    )
    try:
        receiver.serve(should_stop, idle_stop_s)
    finally:
        receiver.close()
    return receiver.counts
