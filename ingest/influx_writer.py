"""Raw telemetry to InfluxDB: batched, retried with backoff, bounded, and counted.

Writes go through influxdb-client's v2 write API, which InfluxDB 1.8+ serves too (token
"user:password", org "-", bucket "database/retention-policy"). A 5xx, a 429 or a timeout is
retried with exponential backoff; a 4xx is not (the same bytes would fail again) and the lines
are counted as dropped with the server's reason in the log. When the database is down for long,
the buffer is bounded: the oldest batches are evicted, counted and logged, so memory stays flat
and the stream keeps flowing to detection (Kafka still holds the raw data for replay).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

from influxdb_client.client.influxdb_client import InfluxDBClient
from influxdb_client.client.write_api import SYNCHRONOUS
from influxdb_client.domain.write_precision import WritePrecision
from influxdb_client.rest import ApiException
from urllib3.exceptions import HTTPError as Urllib3HTTPError

from ingest.frames import Frame
from ingest.lineprotocol import encode
from ingest.pipeline import IngestStats
from vocab.settings import InfluxSettings

log = logging.getLogger(__name__)

Sleep = Callable[[float], None]


class InfluxWriteError(RuntimeError):
    """A write the database refused for good (4xx), with its reason."""


def _retryable(exc: Exception) -> bool:
    if isinstance(exc, ApiException):
        return exc.status is None or exc.status >= 500 or exc.status == 429
    return isinstance(exc, (Urllib3HTTPError, OSError, TimeoutError))


class InfluxWriter:
    """A FrameSink: `write` buffers encoded lines, `flush` sends them in batches."""

    def __init__(self, settings: InfluxSettings, stats: IngestStats | None = None, sleep: Sleep = time.sleep) -> None:
        self.settings = settings
        self.stats = stats if stats is not None else IngestStats()
        self._sleep = sleep
        self._client = InfluxDBClient(
            url=settings.url,
            token=settings.token.get_secret_value(),
            org=settings.org,
            timeout=int(settings.timeout_s * 1000),
        )
        self._api = self._client.write_api(write_options=SYNCHRONOUS)
        self._buffer: deque[list[bytes]] = deque()
        self._buffered_lines = 0

    def write(self, frames: dict[str, Frame]) -> None:
        storable = [f.with_values_only() for f in frames.values()]
        self.stats.blank_rows += sum(len(f) for f in frames.values()) - sum(len(f) for f in storable)
        lines = encode(storable).splitlines()
        for start in range(0, len(lines), self.settings.batch_lines):
            chunk = lines[start : start + self.settings.batch_lines]
            self._buffer.append(chunk)
            self._buffered_lines += len(chunk)
        while self._buffered_lines > self.settings.max_buffered_lines:
            evicted = self._buffer.popleft()
            self._buffered_lines -= len(evicted)
            self.stats.dropped += len(evicted)
            log.error("influx buffer full (%d lines): dropped the oldest %d lines", self._buffered_lines, len(evicted))

    def flush(self) -> None:
        """Send everything buffered; a batch that fails for good is counted as dropped."""
        while self._buffer:
            chunk = self._buffer[0]
            try:
                self._send(b"\n".join(chunk))
                self.stats.written += len(chunk)
            except InfluxWriteError as exc:
                self.stats.dropped += len(chunk)
                log.error("influx dropped %d lines: %s", len(chunk), exc)
            self._buffer.popleft()
            self._buffered_lines -= len(chunk)

    def write_points(self, body: bytes) -> None:
        """Write already-encoded line protocol now (the service's own metrics)."""
        self._send(body)

    def _send(self, body: bytes) -> None:
        delay = self.settings.retry_initial_s
        for attempt in range(self.settings.max_retries + 1):
            try:
                self._api.write(
                    bucket=self.settings.bucket,
                    org=self.settings.org,
                    record=body,
                    write_precision=WritePrecision.NS,  # type: ignore[arg-type]  # the enum is typed as str
                )
                return
            except Exception as exc:
                if not _retryable(exc):
                    raise InfluxWriteError(_describe(exc)) from None
                if attempt == self.settings.max_retries:
                    raise InfluxWriteError(f"gave up after {attempt + 1} attempts: {_describe(exc)}") from None
                self.stats.retried += 1
                log.warning("influx write failed (%s); retry in %.1fs", _describe(exc), delay)
                self._sleep(delay)
                delay = min(delay * 2, self.settings.retry_max_s)

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]


def _describe(exc: Exception) -> str:
    """The error without the URL or headers (they may carry credentials)."""
    if isinstance(exc, ApiException):
        body = (exc.body or b"")[:300] if isinstance(exc.body, bytes) else str(exc.body or "")[:300]
        return f"HTTP {exc.status} {exc.reason}: {body!r}"
    return type(exc).__name__
