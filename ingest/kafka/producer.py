"""Publishing: telemetry and the daemons' records, delivered or the daemon does not commit."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence

from kafka import KafkaProducer
from kafka.errors import KafkaError, KafkaTimeoutError

from ingest.deadletter import DeadLetter
from ingest.kafka.client import OUTAGE_TOLERANCE_MS, RECONNECT_BACKOFF_MAX_MS, KafkaIOError, security
from ingest.messages import MAX_MESSAGE_BYTES, Message

log = logging.getLogger(__name__)


class TelemetryProducer:
    def __init__(self, bootstrap: str, client_id: str = "aiops-producer") -> None:
        self.failed = 0  # records the broker never took (after OUTAGE_TOLERANCE_MS)
        # (topic, key, value) -> True for a record already on its topic: a daemon replaying from
        # its checkpoint skips what it published before a crash (aiops.daemon_state.PublishedSince)
        self.already_published: Callable[[str, bytes | None, bytes], bool] | None = None
        try:
            self._producer = KafkaProducer(
                bootstrap_servers=bootstrap,
                client_id=client_id,
                **security(),
                acks="all",
                linger_ms=20,
                batch_size=1 << 20,
                max_request_size=MAX_MESSAGE_BYTES,
                delivery_timeout_ms=OUTAGE_TOLERANCE_MS,
                reconnect_backoff_max_ms=RECONNECT_BACKOFF_MAX_MS,
                max_block_ms=OUTAGE_TOLERANCE_MS,  # a full buffer waits for the broker: backpressure
            )
        except KafkaError as exc:
            raise KafkaIOError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc

    def _failed(self, exc: BaseException) -> None:
        self.failed += 1
        if self.failed == 1:
            log.error("a record was not delivered: %s", exc)

    def send(self, topic: str, messages: Iterator[Message] | Sequence[Message]) -> int:
        count = 0
        for m in messages:
            self._producer.send(topic, key=m.key, value=m.value, timestamp_ms=m.timestamp_ms).add_errback(self._failed)
            count += 1
        return count

    def send_raw(self, topic: str, value: bytes, key: bytes | None = None, partition: int | None = None) -> None:
        if self.already_published is not None and self.already_published(topic, key, value):
            return
        self._producer.send(topic, key=key, value=value, partition=partition).add_errback(self._failed)

    def flush(self, timeout_s: float = 60.0, should_stop: Callable[[], bool] | None = None) -> None:
        """Wait until the broker has everything sent so far. With `should_stop`, a broker that
        is away is waited for (logged every `timeout_s`) until it is back or the daemon is asked
        to stop (KafkaIOError: the caller must not commit). A record the broker never took
        raises KafkaIOError too: committing past it would lose it."""
        while True:
            try:
                self._producer.flush(timeout=timeout_s)
                break
            except KafkaTimeoutError:
                if should_stop is None or should_stop():
                    raise KafkaIOError(f"Kafka took nothing for {timeout_s:.0f} s; not committed") from None
                log.warning("Kafka has not taken what was sent for %.0f s; waiting for the broker", timeout_s)
        if self.failed:
            raise KafkaIOError(f"{self.failed} records were not delivered; not committed (they will be produced again)")

    def close(self) -> None:
        self._producer.close()


class KafkaDeadLetterSink:
    """Dead letters to a topic as JSON (stage, reason, the line, where it came from)."""

    def __init__(self, producer: TelemetryProducer, topic: str) -> None:
        self._producer = producer
        self._topic = topic

    def add(self, letters: Sequence[DeadLetter]) -> None:
        for letter in letters:
            self._producer.send_raw(self._topic, letter.to_json(), key=letter.category.encode())

    def flush(self, should_stop: Callable[[], bool] | None = None) -> None:
        self._producer.flush(should_stop=should_stop)
