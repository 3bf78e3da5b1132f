"""Kafka edges: publish, consume at least once, read topics and their offsets.

The only package that imports the Kafka client library (kafka-python): everything else reaches
the broker through the names below, and the pure message helpers (grouping lines into messages,
joining a poll into a batch) live apart in `ingest.messages`.
"""

from ingest.kafka.admin import (
    TOPIC_CONFIG,
    Offsets,
    Record,
    cluster_and_topic_ids,
    delete_topics,
    ensure_topics,
    first_records,
    group_lag,
    records_since,
    topic_beginnings,
    topic_ends,
    whole_topic,
)
from ingest.kafka.client import (
    ENDS_EVERY_S,
    JOIN_TIMEOUT_S,
    MAX_REJOINS,
    OUTAGE_TOLERANCE_MS,
    QUIET_CHECK_S,
    RECONNECT_BACKOFF_MAX_MS,
    KafkaIOError,
    security,
    until_reachable,
)
from ingest.kafka.consumer import STANDBY, OneActiveAssignor, TelemetryConsumer, TopicReader
from ingest.kafka.producer import KafkaDeadLetterSink, TelemetryProducer

__all__ = [
    "ENDS_EVERY_S",
    "JOIN_TIMEOUT_S",
    "MAX_REJOINS",
    "OUTAGE_TOLERANCE_MS",
    "QUIET_CHECK_S",
    "RECONNECT_BACKOFF_MAX_MS",
    "STANDBY",
    "TOPIC_CONFIG",
    "KafkaDeadLetterSink",
    "KafkaIOError",
    "Offsets",
    "OneActiveAssignor",
    "Record",
    "TelemetryConsumer",
    "TelemetryProducer",
    "TopicReader",
    "cluster_and_topic_ids",
    "delete_topics",
    "ensure_topics",
    "first_records",
    "group_lag",
    "records_since",
    "security",
    "topic_beginnings",
    "topic_ends",
    "until_reachable",
    "whole_topic",
]
