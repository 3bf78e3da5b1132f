"""kafka-python's errors as the daemons see them: a broker away or restarting is waited for, a
refusal that stands ends the start with its reason (ingest.kafka.client.until_reachable)."""

from __future__ import annotations

import pytest
from kafka.errors import KafkaConnectionError, NotControllerError, TopicAuthorizationFailedError

from ingest.kafka import KafkaIOError, until_reachable
from ingest.kafka.admin import _io_error


def test_a_connection_dropped_mid_request_is_the_broker_away_and_a_refusal_stands() -> None:
    # what the admin client raised when a daemon created its topics during a broker restart
    assert _io_error("cannot create", KafkaConnectionError("socket disconnected")).retriable
    assert _io_error("cannot create", NotControllerError()).retriable  # the controller moving
    refused = _io_error("cannot create", TopicAuthorizationFailedError())
    assert not refused.retriable and "TopicAuthorizationFailed" in str(refused)


def test_a_daemon_starting_waits_through_a_restart_but_not_through_a_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    waited: list[float] = []
    monkeypatch.setattr("ingest.kafka.client.time.sleep", waited.append)
    raised = [_io_error("x", KafkaConnectionError("socket disconnected")), KafkaIOError("cannot reach Kafka")]

    def connect() -> str:
        if raised:
            raise raised.pop(0)
        return "topics"

    assert until_reachable(connect, lambda: False) == "topics"
    assert waited == [1.0, 2.0]  # backing off

    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        raise _io_error("cannot create", TopicAuthorizationFailedError())

    with pytest.raises(KafkaIOError, match="TopicAuthorizationFailed"):
        until_reachable(refused, lambda: False)
    assert len(calls) == 1
