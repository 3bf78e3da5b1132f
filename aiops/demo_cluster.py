"""`aiops demo` (default): a generated cluster with a handful of faults through the whole
in-process pipeline — generator → line protocol on an in-process queue (standing in for Kafka) →
ingest core → detectors (→ failure predictor, when its model is ready) — at accelerated time,
with a progress line, then what was found against the generator's truth."""

from __future__ import annotations

import queue
import threading
import time

from rich.console import Console
from rich.table import Table

from detectors.anomaly import Anomaly
from detectors.evaluate import evaluate
from detectors.predict.online import OnlinePredictor, Prediction, evaluate_predictions
from detectors.runner import DetectLoop, apply_events
from telemetry_gen.generator import GenConfig, Generation

_DONE = b""
DEMO_FAULTS = "gpu_straggler=1,psu_failure=1,leaf_down=1,pfc_storm=1,gpu_fell_off_bus=1,nic_link_flap=1"


def run_cluster_demo(
    gpus: int = 256,
    hours: float = 1.5,
    interval: float = 30.0,
    seed: int = 7,
    faults: str = DEMO_FAULTS,
    predictor: OnlinePredictor | None = None,
    console: Console | None = None,
) -> int:
    console = console or Console()
    gen = Generation(GenConfig(gpus=gpus, hours=hours, interval=interval, seed=seed, faults=faults))
    console.print(
        f"[bold]aiops demo[/bold]: {gpus} GPUs ({gen.topology.entity_count:,} entities), {hours} h at {interval:g} s, "
        f"{len(gen.faults)} injected faults, jobs, checkpoints and maintenance; everything in-process"
    )
    inbox: queue.Queue[bytes] = queue.Queue(maxsize=4)

    def exporter() -> None:  # the generator's side: encoded ticks onto the "topic"
        for tick in gen.ticks():
            inbox.put(b"".join(lines for _, lines in _encoded(gen, tick)))
        inbox.put(_DONE)

    loop = DetectLoop(interval=interval, predictor=predictor)
    apply_events(loop.stack, gen.events())
    anomalies: list[Anomaly] = []
    started = time.perf_counter()
    threading.Thread(target=exporter, name="demo-exporter", daemon=True).start()
    with console.status("running") as status:
        while (data := inbox.get()) != _DONE:
            found, _ = loop.feed(data)
            anomalies += found
            rate = loop.stats.values / (time.perf_counter() - started)
            status.update(
                f"{loop.stats.ticks} ticks, {loop.stats.values:,} values, {len(anomalies)} anomalies, "
                f"{len(loop.predictions)} predictions, {rate:,.0f} values/s"
            )
        anomalies += loop.finish()
    elapsed = time.perf_counter() - started
    _show(console, gen, anomalies, loop.predictions, interval, gpus, hours)
    console.print(
        f"{loop.stats.values:,} values in {elapsed:.1f} s ({loop.stats.values / elapsed:,.0f} values/s); "
        f"{loop.stats.suppressed} anomalies held back for announced maintenance"
    )
    return 0


def _encoded(gen: Generation, tick: object) -> list[tuple[object, bytes]]:
    from ingest.lineprotocol import lines_to_bytes

    return [(frame, lines_to_bytes(lines)) for frame, lines in gen.sim.lines(tick)]  # type: ignore[arg-type]


def _show(
    console: Console,
    gen: Generation,
    anomalies: list[Anomaly],
    predictions: list[Prediction],
    interval: float,
    gpus: int,
    hours: float,
) -> None:
    report = evaluate(anomalies, gen.truth(), interval, gpus, hours)
    table = Table(title="Injected faults and what the detectors saw first")
    for col in ("fault", "root", "onset (min)", "first anomaly on it", "delay (ticks)"):
        table.add_column(col)
    by_entity: dict[str, list[Anomaly]] = {}
    for a in anomalies:
        by_entity.setdefault(a.entity, []).append(a)
    for f in gen.faults:
        hits = sorted((a for e in f.affected for a in by_entity.get(e, []) if a.at >= f.onset), key=lambda a: a.at)
        first = hits[0] if hits else None
        table.add_row(
            f.kind,
            f.root,
            f"{(f.onset - gen.workload.t0) / 60:.1f}",
            f"{first.entity} {first.metric} ({first.detector})" if first else "—",
            f"{(first.at - f.onset) / interval:.1f}" if first else "—",
        )
    console.print(table)
    console.print(
        f"detected within two ticks: {sum(r.detected for r in report.kinds.values())}/{len(gen.faults)}; "
        f"alarm episodes {report.episodes}, false {report.false_alarm_episodes}"
    )
    if predictions:
        p = evaluate_predictions(predictions, gen.truth())
        console.print(f"{len(predictions)} failure predictions, {p.hits} came true within their horizon")
