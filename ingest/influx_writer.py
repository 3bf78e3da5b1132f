"""Raw telemetry to InfluxDB: batched, retried with backoff, never dropped while Kafka holds it.

Writes go through influxdb-client's v2 write API, which InfluxDB 1.8+ serves too (token
"user:password", org "-", bucket "database/retention-policy"). A 5xx, a 429 or a timeout is
retried with exponential backoff; when the database stays away (or the database does not exist)
`flush` raises `InfluxUnavailableError` and keeps everything buffered: the consumer then stops
committing and pauses, so Kafka is the buffer and nothing is lost. A 4xx for a batch is split in
halves until the lines the database refuses are found; those are returned with its reason, to be
dead-lettered, and the rest is written (InfluxDB overwrites a point it already has, so writing the
good half again is harmless).
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
from ingest.pipeline import IngestStats, SinkUnavailableError
from vocab.settings import InfluxSettings

log = logging.getLogger(__name__)

Sleep = Callable[[float], None]


class InfluxWriteError(RuntimeError):
    """A write the database refused for good (4xx), with its reason."""


class InfluxUnavailableError(SinkUnavailableError):
    """The database cannot take writes now (down, overloaded, or the database is missing).
    Nothing was dropped: what was buffered stays buffered for the next flush."""


# A 4xx that is about the database, not the lines: every line would be refused alike
_WHOLE_DATABASE = ("database not found", "retention policy not found", "authorization failed", "unauthorized")


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
        self.write_lines(encode(storable).splitlines())

    def write_lines(self, lines: list[bytes]) -> None:
        """Buffer encoded lines for the next flush, in batches of `batch_lines`."""
        for start in range(0, len(lines), self.settings.batch_lines):
            chunk = lines[start : start + self.settings.batch_lines]
            self._buffer.append(chunk)
            self._buffered_lines += len(chunk)

    @property
    def buffered_lines(self) -> int:
        return self._buffered_lines

    def flush(self) -> list[tuple[bytes, str]]:
        """Send everything buffered. Returns the lines the database refused for good, each with
        its reason (for the dead-letter topic); raises InfluxUnavailableError, keeping the rest
        buffered, while the database cannot take writes."""
        refused: list[tuple[bytes, str]] = []
        while self._buffer:
            chunk = self._buffer[0]
            refused += self._send_or_split(chunk)
            self._buffer.popleft()
            self._buffered_lines -= len(chunk)
        return refused

    def _send_or_split(self, chunk: list[bytes]) -> list[tuple[bytes, str]]:
        """Write the chunk; on a 4xx, halves until the refused lines are alone."""
        try:
            self._send(b"\n".join(chunk))
            self.stats.written += len(chunk)
            return []
        except InfluxWriteError as exc:
            reason = str(exc)
            if any(s in reason.lower() for s in _WHOLE_DATABASE):
                raise InfluxUnavailableError(reason) from None
            if len(chunk) == 1:
                log.warning("influx refused a line: %s", reason)
                return [(chunk[0], reason)]
        half = len(chunk) // 2
        return self._send_or_split(chunk[:half]) + self._send_or_split(chunk[half:])

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
                    raise InfluxUnavailableError(f"no write after {attempt + 1} attempts: {_describe(exc)}") from None
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
