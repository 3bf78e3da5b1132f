"""`aiops demo` (default): a generated cluster with a handful of faults through the whole
pipeline in-process — generator → line protocol on an in-process queue (standing in for Kafka)
→ ingest core → detectors and failure predictor → root-cause engine and incidents — at
accelerated time, with a live view, then what it found against the generator's truth."""

from __future__ import annotations

import json
import os
import queue
import shlex
import shutil
import sys
import threading
import time
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any, cast

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from aiops.pipeline import Pipeline
from aiops.progress_bar import output_console
from detectors.anomaly import Prediction
from detectors.predict.online import OnlinePredictor
from notify.service import Notifier, topology_locate
from rca.evaluate import detections, evaluate_run, latest_states
from rca.graph import TopologyGraph
from rca.incidents import Incident
from telemetry_gen.generator import GenConfig, Generation
from vocab import registry

_DONE = b""
# a few faults that strike without warning, and every kind that announces itself (the predictor's)
_ANNOUNCED = [kind for kinds in registry.predictable_by_root().values() for kind in kinds]
DEMO_FAULTS = ",".join(f"{kind}=1" for kind in ["gpu_straggler", "psu_failure", "leaf_down", "pfc_storm", *_ANNOUNCED])
SEVERITY_STYLE = {"critical": "bold red", "major": "red", "minor": "yellow", "warning": "cyan"}


def run_cluster_demo(
    gpus: int = 256,
    hours: float = 4.0,
    interval: float = 30.0,
    seed: int = 7,
    faults: str = DEMO_FAULTS,
    predictor: OnlinePredictor | None = None,
    speed: float | None = None,
    console: Console | None = None,
    notifier: Notifier | None = None,
    report: Path | None = None,
) -> int:
    """`speed`: simulated seconds per wall-clock second (None: as fast as it goes). On a
    terminal the view of open incidents is redrawn as it goes; piped or to a file, it is printed
    once at the end, and every table keeps its columns whole. With `report`, the run is kept
    there as `aiops run` and `aiops gen` would have written it (run/, cluster/) and drawn as the
    report pages (index.html, an incident page each)."""
    console = console or output_console()
    gen = Generation(GenConfig(realism="clean", gpus=gpus, hours=hours, interval=interval, seed=seed, faults=faults))
    console.print(
        f"[bold]aiops demo[/bold]: {gpus} GPUs ({gen.topology.entity_count:,} entities), {hours:g} h at "
        f"{interval:g} s ticks, {len(gen.faults)} injected faults plus jobs, checkpoints and maintenance; "
        "everything in-process, no services"
    )
    graph = TopologyGraph.from_json(gen.topology.to_json())
    pipeline = Pipeline(graph, interval, gen.events(), predictor)
    if notifier is not None:  # chat messages as the incidents come, in the demo's event time
        notifier.router.locate = topology_locate(graph)
        pipeline.notifier = notifier
    inbox: queue.Queue[bytes] = queue.Queue(maxsize=4)
    recording: IO[bytes] | None = None
    if report is not None:  # the cluster as `aiops gen --out` writes it: the report draws its series
        (report / "cluster").mkdir(parents=True, exist_ok=True)
        gen.topology.write(report / "cluster" / "topology.json")
        recording = (report / "cluster" / "telemetry.lp").open("wb")

    def exporter() -> None:  # the cluster's side: one encoded tick at a time onto the "topic"
        from ingest.lineprotocol import lines_to_bytes

        for tick in gen.ticks():
            data = b"".join(lines_to_bytes(lines) for _, lines in gen.sim.lines(tick))
            if recording is not None:
                recording.write(data)
            inbox.put(data)
            if speed:
                time.sleep(interval / speed)
        if recording is not None:
            recording.close()
        inbox.put(_DONE)

    states: list[dict[str, Any]] = []
    predictions: list[Prediction] = []
    started = drawn = time.perf_counter()
    threading.Thread(target=exporter, name="demo-exporter", daemon=True).start()
    live = Live(console=console, auto_refresh=False, transient=False) if console.is_interactive else None
    with live if live is not None else nullcontext():
        while True:
            data = inbox.get()
            if data == _DONE:
                pipeline.finish()
            else:
                pipeline.feed(data)
            new_predictions, changes = pipeline.take()
            predictions += new_predictions
            states += [r.to_dict() for r in changes]
            # drawing costs more than a tick: a few frames a second
            if live is not None and (data == _DONE or time.perf_counter() - drawn >= 0.2):
                live.update(_view(pipeline, predictions, started, gen.workload.t0), refresh=True)
                drawn = time.perf_counter()
            elif live is None and data != _DONE and time.perf_counter() - drawn >= 4.0:
                # a pipe or a log: no redraws, but a line every few seconds says it is running
                done_h = (pipeline.last_tick - gen.workload.t0) / 3600 if pipeline.last_tick is not None else 0.0
                console.print(
                    f"  cluster time {done_h:.1f} h of {hours:g} h, {pipeline.engine_stats.opened} incidents, "
                    f"{len(predictions)} predictions so far",
                    highlight=False,
                )
                drawn = time.perf_counter()
            if data == _DONE:
                break
    if live is None:  # a pipe or a file: the last view once, not a frame per redraw
        console.print(_view(pipeline, predictions, started, gen.workload.t0))
    elapsed = time.perf_counter() - started
    values = pipeline.detect.stats.values
    console.print(f"{values:,} values in {elapsed:.1f} s ({values / elapsed:,.0f} values/s)")
    earliest = gen.workload.t0 + predictor.warmup_s if predictor is not None else None
    _report(console, gen, states, predictions, interval, earliest)
    if report is not None:
        _pages(console, report, gen, pipeline, states, predictions, elapsed)
    console.print(next_steps(report))
    return 0


def _pages(
    console: Console,
    out: Path,
    gen: Generation,
    pipeline: Pipeline,
    states: list[dict[str, Any]],
    predictions: list[Prediction],
    seconds: float,
) -> None:
    """The run as `aiops run --out` and `aiops gen --out` leave it, then its report pages."""
    from aiops.pipeline import RunStats, input_record
    from aiops.progress_bar import Progress
    from show.report import write_report
    from telemetry_gen.generator import write_jsonl, write_meta

    console.print(f"writing the run and its report pages to {out}", highlight=False)
    cluster, run = out / "cluster", out / "run"
    run.mkdir(parents=True, exist_ok=True)
    write_meta(cluster / "meta.json", gen)
    write_jsonl(cluster / "events.jsonl", gen.events())
    write_jsonl(cluster / "truth.jsonl", gen.truth())
    with (run / "incidents.jsonl").open("w") as f:
        f.writelines(json.dumps(state, sort_keys=True) + "\n" for state in states)
    with (run / "predictions.jsonl").open("wb") as fb:
        fb.writelines(p.to_json() + b"\n" for p in predictions)
    stats = pipeline.finish_stats(RunStats(), seconds)
    stats.anomalies, stats.predictions, stats.incidents = pipeline.detect.stats.anomalies, len(predictions), len(states)
    engine = asdict(pipeline.engine_stats)
    (run / "run.json").write_text(
        json.dumps(
            {**asdict(stats), "engine": engine, "coverage": pipeline.coverage(), "input": input_record(cluster)},
            indent=1,
        )
        + "\n"
    )
    incidents = len(latest_states(states))
    # on a terminal a bar; piped, a line every few seconds says it is running (aiops/progress_bar.py)
    with Progress(incidents, "the report pages", "incident pages") as bar:
        done = write_report(run, out, cluster / "truth.jsonl", cluster, progress=lambda n: bar.update(completed=n))
    console.print(f"report: {out / 'index.html'} ({done['pages']} incident pages, {len(done['pngs'])} pictures)")


def _shown(path: Path) -> str:
    """A path as a shell takes it from here: relative when it is below the working folder."""
    try:
        relative = path.absolute().relative_to(Path.cwd())
    except ValueError:
        return shlex.quote(str(path.absolute()))
    shown = str(relative)
    return shlex.quote(shown if "/" in shown else f"./{shown}")


def aiops_command() -> str:
    """`aiops` as this shell can run it: `aiops` when that is on PATH and is this installation's,
    else the console script beside the running interpreter (a virtual environment not activated:
    .venv/bin/aiops), else `python -m aiops.cli` with this interpreter."""
    beside = Path(sys.executable).parent / "aiops"
    on_path = shutil.which("aiops")
    if on_path is not None and (not beside.is_file() or Path(on_path).resolve() == beside.resolve()):
        return "aiops"
    if beside.is_file() and os.access(beside, os.X_OK):
        return _shown(beside)
    return f"{shlex.quote(sys.executable)} -m aiops.cli"


def _opener() -> str | None:
    """The command that opens a file in the desktop's browser, where there is one."""
    if sys.platform == "darwin":
        return "open"
    return "xdg-open" if shutil.which("xdg-open") else None


def next_steps(report: Path | None) -> Text:
    """What to run after the demo: the same pipeline on a cluster of one's own size, from files,
    then as the daemons a site runs. Each line runs as printed from where the demo ran (a line
    that is only a comment, `# ...`, names what has no command here)."""
    aiops = aiops_command()
    steps: list[tuple[str, str]] = []
    if report is not None:
        page = report / "index.html"
        opener = _opener()
        if opener is not None:
            steps.append((f"{opener} {shlex.quote(str(page))}", "the report: a page per incident"))
        else:
            steps.append(("", f"open {page} in a browser: the report, a page per incident"))
    steps += [
        (f"{aiops} gen --out cluster --gpus 1024 --hours 6", "a generated cluster, as files"),
        (f"{aiops} run --input cluster --out run", "the whole pipeline over it"),
        (f"{aiops} report run --truth cluster/truth.jsonl --out pages", "its report pages"),
    ]
    services = Path(__file__).resolve().parents[2] / "scripts" / "services"
    if services.is_file():  # a checkout; an installed package has no scripts/
        steps.append((f"{_shown(services)} up", "Kafka and InfluxDB for the daemons: docs/operating.md"))
    else:
        steps.append(("", "Kafka and InfluxDB for the daemons: docs/operating.md"))
    width = max(len(command) for command, _ in steps)
    lines = ["", "Next:"]
    lines += [f"  {command:<{width}}  # {why}" if command else f"  # {why}" for command, why in steps]
    return Text("\n".join(lines))


def gpu_days(gen: Generation) -> float:
    """The GPU-days the run covered: the false-incident rate's base, as `aiops eval` takes it from
    meta.json (GPUs × the simulated window)."""
    return gen.config.gpus * gen.sim.steps * gen.config.interval / 86_400


def _view(pipeline: Pipeline, predictions: list[Prediction], started: float, t0: float) -> Group:
    stats = pipeline.detect.stats
    elapsed = max(time.perf_counter() - started, 1e-9)
    now = (pipeline.last_tick - t0) / 3600 if pipeline.last_tick is not None else 0.0
    head = Text(
        f"cluster time {now:5.2f} h, {stats.ticks} ticks, {stats.values:,} values "
        f"({stats.values / elapsed:,.0f}/s)\n{stats.anomalies:,} anomalies -> "
        f"{pipeline.engine_stats.opened} incidents ({pipeline.engine_stats.attached:,} symptoms folded in), "
        f"{len(predictions)} predictions"
    )
    table = Table(title="open incidents and warnings")
    for col in ("id", "severity", "root cause", "kind", "affected", "jobs/GPUs"):
        table.add_column(col, no_wrap=True)
    shown: list[Incident] = sorted(
        {id(i): i for i in pipeline.engine.open.values()}.values(), key=lambda i: (i.status != "open", i.opened)
    )
    for i in shown[:12]:
        table.add_row(
            i.incident_id,
            Text(i.severity, style=SEVERITY_STYLE.get(i.severity, "")),
            i.root.entity,
            i.root.kind,
            str(len(i.affected)),
            f"{len(i.jobs)}/{i.gpus_hit}",
        )
    return Group(head, table)


def _report(
    console: Console,
    gen: Generation,
    states: list[dict[str, Any]],
    predictions: list[Prediction],
    interval: float,
    earliest: float | None,
) -> None:
    truth = cast(list[dict[str, Any]], gen.truth())
    incidents = [dict(i) for i in latest_states(states)]
    table = Table(title="Injected faults and the incidents that named them")
    for col in ("fault", "root", "onset h", "incident", "named root", "ticks to detect"):
        table.add_column(col, no_wrap=True)
    found = detections(truth, incidents)
    for f in truth:
        d = found.get(f["fault_id"])
        table.add_row(
            f["kind"],
            f["root"],
            f"{(f['onset'] - gen.workload.t0) / 3600:.2f}",
            d.incident_id if d else "missed",
            ("yes" if d.top[0] == f["root"] else f"no: {d.top[0]}") if d else "—",
            f"{d.ttd_s / interval:.1f}" if d else "—",
        )
    console.print(table)
    result = evaluate_run(
        truth,
        incidents,
        [_as_dict(p) for p in predictions],
        interval_s=interval,
        earliest=earliest,
        gpu_days=gpu_days(gen),
    )
    console.print(result.format_table(), soft_wrap=True, highlight=False)


def _as_dict(p: Prediction) -> dict[str, Any]:
    return dict(json.loads(p.to_json()))


__all__ = ["DEMO_FAULTS", "next_steps", "run_cluster_demo"]
