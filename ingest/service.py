"""The ingest daemon: Kafka -> decode/validate -> raw telemetry to InfluxDB (every value, or per
window when the site chose a resolution: ingest/downsample.py), bad input to the dead-letter
topic, and the service's own counters to InfluxDB (measurement `aiops_ingest`)."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable

from ingest.consume import consume
from ingest.downsample import Downsampler
from ingest.influx_writer import InfluxUnavailableError, InfluxWriteError, InfluxWriter
from ingest.kafka import KafkaDeadLetterSink, TelemetryConsumer, TelemetryProducer, ensure_topics, until_reachable
from ingest.pipeline import FrameSink, IngestCore, IngestStats
from vocab.settings import Settings

log = logging.getLogger(__name__)

STATS_MEASUREMENT = "aiops_ingest"


def stats_line(stats: IngestStats, instance: str, time_ns: int) -> bytes:
    fields = ",".join(f"{k}={v}i" for k, v in stats.as_fields().items())
    return f"{STATS_MEASUREMENT},instance={instance} {fields} {time_ns}".encode()


def run_ingest_service(
    settings: Settings,
    should_stop: Callable[[], bool],
    idle_stop_s: float | None = None,
    stats_every_s: float = 10.0,
) -> IngestStats:
    kafka = settings.kafka
    # started while the broker is away (a restart, compose bringing services up): wait for it
    until_reachable(
        lambda: ensure_topics(kafka.bootstrap, [kafka.telemetry_topic, kafka.deadletter_topic]), should_stop
    )
    core = IngestCore()
    writer = InfluxWriter(settings.influx, core.stats)
    # raw telemetry per window when the site chose a resolution (full resolution stays in Kafka)
    sink: FrameSink = writer
    downsampler: Downsampler | None = None
    if settings.ingest.downsample_s > 0:
        downsampler = Downsampler(
            writer, settings.ingest.downsample_s, settings.ingest.downsample_lateness_s, core.stats
        )
        sink = downsampler
        log.info(
            "storing raw telemetry per %g s window (lateness %g s)",
            settings.ingest.downsample_s,
            settings.ingest.downsample_lateness_s,
        )
    producer = until_reachable(
        lambda: TelemetryProducer(kafka.bootstrap, client_id="aiops-ingest-deadletters"), should_stop
    )
    # a rebalance takes partitions away: their open windows are the next owner's to read again
    forget = downsampler.forget if downsampler is not None else None
    consumer = until_reachable(lambda: TelemetryConsumer(kafka, on_revoked=forget), should_stop)
    instance = socket.gethostname().replace(" ", "_").replace(",", "_")
    last_stats = time.monotonic()

    def after_batch(info: dict[str, object]) -> None:
        nonlocal last_stats
        now = time.monotonic()
        if now - last_stats >= stats_every_s:
            last_stats = now
            report(info)

    def report(info: dict[str, object] | None = None) -> None:
        # The service's own health is wall-clock data by nature (when did it write what).
        try:
            writer.write_points(stats_line(core.stats, instance, time.time_ns()))
        except (InfluxWriteError, InfluxUnavailableError) as exc:
            log.warning("could not write ingest stats: %s", exc)
        log.info("ingest %s last=%s", core.stats.as_fields(), info)

    try:
        consume(
            consumer,
            core,
            sink,
            KafkaDeadLetterSink(producer, kafka.deadletter_topic),
            should_stop,
            idle_stop_s=idle_stop_s,
            on_batch=after_batch,
        )
        report()
    finally:
        consumer.close()
        producer.close()
        writer.close()
    return core.stats
