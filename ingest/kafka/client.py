"""The Kafka client's connection: TLS settings, errors, waiting for a broker that is away.

This package is the only place the project imports `kafka` (kafka-python): the daemons, the
benches and the checkpoints reach the broker through it (tests/unit/test_layers.py checks).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

JOIN_TIMEOUT_S = 20.0  # a first group join normally takes a few seconds
MAX_REJOINS = 3  # when running until idle (tests, batch jobs); a daemon keeps trying
QUIET_CHECK_S = 5.0  # how often a quiet input is confirmed with the broker (one small request)
ENDS_EVERY_S = 2.0  # how often end offsets are asked for partitions no fetch has answered yet


class KafkaIOError(RuntimeError):
    """Kafka could not be reached or refused a request. `retriable`: whether asking again may
    go otherwise (the broker away or restarting), not a refusal that stands (authorisation, a
    topic's settings)."""

    def __init__(self, message: str, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


def until_reachable(connect: Callable[[], T], should_stop: Callable[[], bool]) -> T:
    """`connect()`, again and again while the broker is away (a daemon started during a broker
    restart waits for it instead of exiting), with backoff up to 30 s. KafkaIOError if asked to
    stop first, or at once for a refusal that asking again would not change."""
    delay = 1.0
    while True:
        try:
            return connect()
        except KafkaIOError as exc:
            if should_stop() or not exc.retriable:
                raise
            log.warning("%s; trying again in %.0f s", exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 30.0)


def security() -> dict[str, object]:
    """The broker's TLS settings for a client (AIOPS_KAFKA__SECURITY_PROTOCOL and the ssl_* files,
    vocab/settings.py), read from the environment as every other setting; none for PLAINTEXT."""
    from vocab.settings import Settings

    return Settings().kafka.client_security()


# How long a record may wait for a broker that is away before the producer gives it up. Outages
# of minutes (a broker restart, a rolling upgrade) must lose nothing; past an hour something
# else is wrong, and a record that failed stops the daemon before it commits (see flush).
OUTAGE_TOLERANCE_MS = 3_600_000
# Reconnect attempts back off exponentially, by default up to 30 s: a broker back after a restart
# would go unnoticed for up to half a minute. One attempt every 2 s at most costs nothing.
RECONNECT_BACKOFF_MAX_MS = 2_000
