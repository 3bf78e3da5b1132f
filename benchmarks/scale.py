"""`aiops bench scale`: split detection at 10,000 and 100,000 GPUs through real Kafka, one
member against two, with the root-cause daemon reading their findings.

Per size, the cluster (10 s scrapes, typical realism, the published fault rate, the predictor on)
is recorded to a folder, and the references run over it offline: `aiops detect --input` (the
anomalies and predictions) and `aiops run --input` (the incidents). Then, per number of detection
members, each run in fresh groups and topics, with the root-cause daemon (`aiops run --kafka
--from-detection`: one member; with two detection members, two, one standing by) beside them:
- backlog (the default): the recording is published whole to a fresh 6-partition topic first, so
  what is measured is what detection can take per second, apart from the generator's and the
  producer's CPU (which a real cluster does not spend on this machine);
- live (`--live`): `aiops gen --kafka --speed 1` publishes the same cluster as it happens, and
  the members keep up or not: lag (how far the newest tick every partition has judged stands
  behind the cluster's clock) sampled over the run, and each tick's delay (from its scrape to
  the last partition's judgement, from the progress records' broker timestamps).
- staged live (`--staged`): as live, but the cluster is generated first into a staging topic (one
  partition, scrape time kept, zstd at rest) and `aiops replay` copies its raw records to the
  telemetry topic as their scrape time comes round. At 100,000 GPUs generating and encoding
  715k values/s as they happen takes more than a core of this 2-core machine, which a real
  cluster spends on its own hosts; the copy takes a few percent of one. There are no offline
  references in this mode (a 30-minute recording would be ~40 GB on disk): the anomalies and
  incidents are counted, not compared; the backlog mode compares them.

Per run: values per second (all values over the span from the first message any member took to
the last tick any member judged), that against real time (a cluster of this size makes
values/interval per second), peak RSS per member, the anomalies and predictions published
compared with the offline run's as multisets, and the incidents compared with the offline run's,
id for id and state for state. The machine's 2 cores are shared by the members, the broker, the
root-cause daemon, the generator when live, and this process (which only samples); the table says
how many cores there were.

Prints a table and writes `scale.json` to `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.backlog import _anomalies, _jsonl, _multiset, _Process, _read
from benchmarks.consume import ConsumeRow, bench_consume
from benchmarks.soak import by_incident, cpu_seconds, incident_differences


@dataclass
class ScaleRun:
    gpus: int
    members: int  # 0: the offline reference
    ticks: int = 0
    values: int = 0
    seconds: float = 0.0
    peak_rss_mb: list[float] = field(default_factory=list)
    anomalies: int = 0
    predictions: int = 0
    equal_to_offline: bool | None = None
    differences: str = ""
    incidents: int = 0
    incidents_equal: bool | None = None
    incident_differences: list[str] = field(default_factory=list)
    lag_s: list[tuple[float, float]] = field(default_factory=list)  # live: (seconds in, lag)
    tick_delay_s: list[float] = field(default_factory=list)  # live: per tick
    # the ticks between the first (members joining, partitions moving) and the last (held for
    # late rows until the input is quiet): seconds per tick judged everywhere, from the progress
    # records' broker times
    steady_s_per_tick: float = 0.0
    # CPU seconds over the run (from the members' start to their end): the members, the
    # root-cause daemons, and the whole machine (the broker, the replay and the rest are the gap)
    cpu_s: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def steady_rate(self) -> float:
        per_tick = self.values / max(self.ticks, 1)
        return per_tick / self.steady_s_per_tick if self.steady_s_per_tick > 0 else 0.0

    @property
    def rate(self) -> float:
        return self.values / self.seconds if self.seconds > 0 else 0.0

    def real_time(self, interval_s: float) -> float:
        """Times real time: values per second against what the cluster makes per second."""
        made_per_s = self.values / max(self.ticks, 1) / interval_s
        return self.rate / made_per_s if made_per_s else 0.0


# The staging topic of `--staged`: one partition (the records stay in scrape order), the
# producer's timestamp kept (the scrape time, which the replay paces by), compressed at rest
# (line protocol shrinks ~5x with zstd: a 30-minute 100,000-GPU recording is ~40 GB raw), never
# expired by time (its timestamps are the simulated cluster's, which may be long past).
STAGING_TOPIC_CONFIG = {"message.timestamp.type": "CreateTime", "compression.type": "zstd", "retention.ms": "-1"}
# The live topic of a staged run: the members read it within seconds, so it keeps ten minutes
# in one-minute segments rather than the whole half-hour's ~40 GB.
LIVE_TOPIC_CONFIG = {"retention.ms": "600000", "segment.ms": "60000"}


def _topic_keys() -> list[str]:
    from vocab.settings import KafkaSettings

    return [key for key in KafkaSettings.model_fields if key.endswith("_topic")]


def scale(args: argparse.Namespace, console: Console) -> list[ScaleRun]:
    from aiops.cli.common import settings_from
    from ingest.kafka import delete_topics, ensure_topics

    bootstrap = settings_from(argparse.Namespace()).kafka.bootstrap
    run_id = f"scale-{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:4]}"
    work = Path(args.work) / run_id
    work.mkdir(parents=True)
    runs: list[ScaleRun] = []
    consumed: dict[int, list[ConsumeRow]] = {}
    args.consumed = consumed
    predict = [] if args.predict else ["--no-predict"]
    args.live = args.live or args.staged
    for gpus in args.sizes:
        folder = work / f"cluster-{gpus}"
        hours = args.ticks * args.interval / 3600
        gen_args = ["--gpus", str(gpus), "--hours", f"{hours:.6f}", "--interval", str(args.interval)]
        gen_args += ["--seed", str(args.seed), "--realism", "typical", "--faults", args.faults]
        topic = f"{run_id}.telemetry.{gpus}"
        if args.staged:  # the recording goes to a topic, not a folder: topology and events to the folder
            console.print(f"[bold]scale[/] {gpus:,} GPUs: {args.ticks} ticks at {args.interval:g} s -> {topic}")
            ensure_topics(bootstrap, [topic], partitions=1, configs=STAGING_TOPIC_CONFIG)
            gen = ["gen", *gen_args, "--kafka", bootstrap, "--truth-dir", str(folder)]
            if _Process(gen, {**os.environ, "AIOPS_KAFKA__TELEMETRY_TOPIC": topic}, work / "gen.log").wait() != 0:
                raise RuntimeError(f"aiops gen failed: see {work / 'gen.log'}")
        else:
            gen = ["gen", *gen_args, "--out", str(folder)]
            console.print(f"[bold]scale[/] {gpus:,} GPUs: {args.ticks} ticks at {args.interval:g} s -> {folder}")
            if _Process(gen, dict(os.environ), work / "gen.log").wait() != 0:
                raise RuntimeError(f"aiops gen failed: see {work / 'gen.log'}")
        expected = None if args.staged else _references(args, gpus, folder, work, runs)
        expected_values = runs[-1].values if expected is not None else _generated_values(work / "gen.log")
        if not args.live:  # published once, drained by each run
            ensure_topics(bootstrap, [topic], partitions=args.partitions)
            produce = ["produce", str(folder / "telemetry.lp"), "--topic", topic, "--partitions", str(args.partitions)]
            if _Process(produce, dict(os.environ), work / "produce.log").wait() != 0:
                raise RuntimeError(f"aiops produce failed: see {work / 'produce.log'}")
            if args.consume:
                consumed[gpus] = bench_consume(bootstrap, topic, args.consume)
                print_consume(gpus, consumed[gpus], console)

        for members in args.members:
            name = f"{gpus}-{members}"
            env = {
                **os.environ,
                **{f"AIOPS_KAFKA__{k.upper()}": f"{run_id}.{name}.{k.removesuffix('_topic')}" for k in _topic_keys()},
                "AIOPS_KAFKA__TELEMETRY_TOPIC": topic if not args.live else f"{run_id}.{name}.telemetry",
                "AIOPS_KAFKA__DETECT_GROUP": f"{run_id}-{name}",
                "AIOPS_KAFKA__RUN_GROUP": f"{run_id}-{name}-rca",
                "AIOPS_STATE_DIR": str(work / "state" / name),
                "OMP_NUM_THREADS": "1",
            }
            if args.live:
                live_topic = env["AIOPS_KAFKA__TELEMETRY_TOPIC"]
                ensure_topics(bootstrap, [live_topic], partitions=args.partitions, configs=LIVE_TOPIC_CONFIG)
            events = ["--events", str(folder / "events.jsonl"), "--interval", str(args.interval), *predict]
            # the root-cause daemon outlasts the members' last ticks: it stops once their findings are quiet
            rca = ["run", "--kafka", bootstrap, "--from-detection", "--topology", str(folder / "topology.json")]
            # (it hears nothing until the members judge their first tick: a lateness and more)
            rca += [*events, "--stop-when-idle", str(args.idle_stop_s + args.lateness + 60)]
            engines = [_Process(rca, env, work / f"rca-{name}-{i}.log") for i in range(min(members, 2))]
            _settled(engines)  # a root-cause daemon runs long before a backlog: its start is not the members'
            machine_before, wall_before = cpu_seconds(), time.monotonic()
            detect = ["detect", "--kafka", bootstrap, *events, "--stop-when-idle", str(args.idle_stop_s)]
            detect += ["--lateness", str(args.lateness)]
            procs = [
                _Process(
                    [*detect, "--stats", str(work / f"stats-{name}-{i}.json")], env, work / f"member-{name}-{i}.log"
                )
                for i in range(members)
            ]
            started_file = work / f"started-{name}"
            if args.staged:
                replay = ["replay", topic, "--kafka", bootstrap, "--speed", "1", "--started-file", str(started_file)]
                procs.append(_Process(replay, env, work / f"replay-{name}.log"))
            elif args.live:
                gen_live = ["gen", *gen_args, "--kafka", bootstrap, "--speed", "1", "--truth-dir", str(work / "live")]
                procs.append(_Process(gen_live, env, work / f"gen-live-{name}.log"))
            codes = _wait_all([*procs, *engines])
            if any(codes):
                raise RuntimeError(f"a member failed ({codes}): see {work}/*-{name}-*.log")
            machine_cpu, wall = (cpu_seconds() or 0.0) - (machine_before or 0.0), time.monotonic() - wall_before
            procs = procs[:members]
            stats = [json.loads((work / f"stats-{name}-{i}.json").read_text()) for i in range(members)]
            # the cluster's values, once: a member that took a partition with its checkpoint
            # carries the counts of the member before it
            cluster_values = expected_values or max(int(s["values"]) for s in stats)
            run = ScaleRun(gpus, members, args.ticks, values=cluster_values, wall_s=wall)
            run.cpu_s = {
                "members": sum(p.cpu_s for p in procs),
                "root-cause": sum(p.cpu_s for p in engines),
                "machine": machine_cpu,
            }
            firsts = [s["first_message_at"] for s in stats if s["first_message_at"]]
            lasts = [s["last_judged_at"] for s in stats if s["last_judged_at"]]
            # less the time the members waited to call the input quiet (the last ticks are held
            # for late rows until then): a live cluster never goes quiet
            idle = min((float(s["idle_wait_s"]) for s in stats if s["last_judged_at"]), default=0.0)
            run.seconds = max(lasts) - min(firsts) - idle if firsts and lasts else 0.0
            run.peak_rss_mb = [proc.peak_mb for proc in procs]
            got_anomalies = _anomalies(bootstrap, env["AIOPS_KAFKA__ANOMALIES_TOPIC"])
            got_predictions = _read(bootstrap, env["AIOPS_KAFKA__PREDICTIONS_TOPIC"])
            run.anomalies, run.predictions = len(got_anomalies), len(got_predictions)
            got_incidents = by_incident(_read(bootstrap, env["AIOPS_KAFKA__INCIDENTS_TOPIC"]))
            run.incidents = len(got_incidents)
            if expected is not None:
                (expected_findings, expected_incidents) = expected
                got = (_multiset(got_anomalies), _multiset(got_predictions))
                run.equal_to_offline = got == expected_findings
                if not run.equal_to_offline:
                    e = expected_findings
                    missing = sum(((e[0] - got[0]) + (e[1] - got[1])).values())
                    extra = sum(((got[0] - e[0]) + (got[1] - e[1])).values())
                    run.differences = f"{missing} missing, {extra} not offline"
                run.incident_differences = incident_differences(got_incidents, expected_incidents)
                run.incidents_equal = not run.incident_differences
            marks = _timestamped(bootstrap, env["AIOPS_KAFKA__PROGRESS_TOPIC"])
            run.steady_s_per_tick = steady_seconds_per_tick(marks)
            if args.live:
                # the replay says when it released the first scrape; a live generator's first
                # record is on the topic (which the replay's short retention may have deleted)
                started = float(started_file.read_text()) if args.staged else _first_append(bootstrap, live_topic)
                run.lag_s, run.tick_delay_s = live_delays(marks, started, args.interval)
                delete_topics(bootstrap, [live_topic])  # ~40 GB a half-hour at 100,000 GPUs
            runs.append(run)
            console.print(
                f"  {members} member(s): {run.rate:,.0f} values/s, anomalies equal to offline: "
                f"{run.equal_to_offline}, incidents: {run.incidents_equal}"
            )
        if args.staged:
            delete_topics(bootstrap, [topic])
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return runs


def _references(
    args: argparse.Namespace, gpus: int, folder: Path, work: Path, runs: list[ScaleRun]
) -> tuple[tuple[Counter[str], Counter[str]], dict[str, list[dict[str, Any]]]]:
    """The offline runs over the recording: `aiops detect --input` (its throughput, anomalies and
    predictions) and `aiops run --input` (its incidents), the reference row appended to `runs`."""
    predict = [] if args.predict else ["--no-predict"]
    offline = work / f"offline-{gpus}"
    reference = ScaleRun(gpus, 0, args.ticks)
    log = work / f"offline-{gpus}.log"
    p = _Process(["detect", "--input", str(folder), "--out", str(offline), *predict], dict(os.environ), log)
    if p.wait() != 0:
        raise RuntimeError(f"offline detection failed: see {log}")
    said = re.search(r"([\d,]+) values in ([\d.]+)s", log.read_text())
    if said is None:
        raise RuntimeError(f"offline detection said no throughput: see {log}")
    reference.values, reference.seconds = int(said[1].replace(",", "")), float(said[2])
    reference.peak_rss_mb = [p.peak_mb]
    anomalies, predictions = _jsonl(offline / "anomalies.jsonl"), _jsonl(offline / "predictions.jsonl")
    reference.anomalies, reference.predictions = len(anomalies), len(predictions)
    offline_run = work / f"offline-run-{gpus}"
    log = work / f"offline-run-{gpus}.log"
    if _Process(["run", "--input", str(folder), "--out", str(offline_run), *predict], dict(os.environ), log).wait():
        raise RuntimeError(f"the offline run failed: see {log}")
    expected_incidents = by_incident(_jsonl(offline_run / "incidents.jsonl"))
    reference.incidents = len(expected_incidents)
    runs.append(reference)
    return (_multiset(anomalies), _multiset(predictions)), expected_incidents


def _generated_values(log: Path) -> int:
    """The values `aiops gen` said it made (0 if it did not say)."""
    said = re.search(r"([\d,]+) values", log.read_text()) if log.exists() else None
    return int(said[1].replace(",", "")) if said else 0


def _settled(procs: list[_Process], quiet_s: float = 3.0, timeout_s: float = 180.0) -> None:
    """Until each process has used under a tenth of a core for `quiet_s` (started: polling)."""
    since = {id(p): (time.monotonic(), p.cpu_s) for p in procs}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now, quiet = time.monotonic(), True
        for p in procs:
            p.sample()
            at, cpu = since[id(p)]
            if p.cpu_s - cpu > 0.1 * (now - at):
                since[id(p)] = (now, p.cpu_s)
                quiet = False
            elif now - at < quiet_s:
                quiet = False
        if quiet:
            return


def judged_everywhere(marks: list[tuple[float, bytes]]) -> dict[int, float]:
    """Per tick (ns), when its last partition said it was judged (the progress records' times)."""
    from detectors.progress_topic import JUDGED, read_mark

    done: dict[int, float] = {}
    for at, value in marks:
        kind, _, tick_ns = read_mark(value)
        if kind == JUDGED:
            done[tick_ns] = max(at, done.get(tick_ns, at))
    return done


def steady_seconds_per_tick(marks: list[tuple[float, bytes]]) -> float:
    """Seconds per tick judged by every partition, from the second tick to the one before the
    last (0 with fewer than four ticks): the first waits for the members to join and share out
    the partitions, the last for the input to go quiet (it is held for late rows)."""
    done = judged_everywhere(marks)
    ticks = sorted(done)
    if len(ticks) < 4:
        return 0.0
    return (done[ticks[-2]] - done[ticks[1]]) / (len(ticks) - 3)


def _timestamped(bootstrap: str, topic: str) -> list[tuple[float, bytes]]:
    """Every record of the topic with the broker's append time (s): the topics the daemons make
    are timestamped by the broker (LogAppendTime), so this is when each arrived."""
    from ingest.kafka import whole_topic

    return [(r.timestamp_ms / 1000, r.value) for r in whole_topic(bootstrap, topic)]


def _first_append(bootstrap: str, topic: str) -> float:
    """When the first record of the topic reached the broker (s): the live generator's first scrape."""
    from ingest.kafka import first_records

    firsts = first_records(bootstrap, topic)
    if not firsts:
        raise RuntimeError(f"nothing on {topic}: the live generator published nothing")
    return min(r.timestamp_ms for r in firsts) / 1000


def live_delays(
    marks: list[tuple[float, bytes]], started: float, interval_s: float, every_s: float = 5.0
) -> tuple[list[tuple[float, float]], list[float]]:
    """From the progress records of a live run, whose generator scraped its first tick at
    `started` (wall clock) and each later one `interval_s` after the one before: the lag sampled
    every `every_s` (how far the newest tick every partition has judged stands behind the
    cluster's clock), and each tick's delay (its last partition's judgement less its scrape)."""
    judged = judged_everywhere(marks)
    if not judged:
        return [], []
    first = min(judged)
    scraped = {t: started + (t - first) / 1e9 for t in judged}
    delays = [judged[t] - scraped[t] for t in sorted(judged)]
    done = sorted((at, t) for t, at in judged.items())  # in the order they completed
    lag: list[tuple[float, float]] = []
    newest, k = None, 0
    end = max(judged.values())
    w = started + every_s
    while w <= end + every_s:
        while k < len(done) and done[k][0] <= w:
            newest = done[k][1] if newest is None else max(newest, done[k][1])
            k += 1
        clock_ns = first + (w - started) * 1e9
        lag.append((w - started, (clock_ns - newest) / 1e9 if newest is not None else w - started))
        w += every_s
    return lag, delays


def _wait_all(procs: list[_Process]) -> list[int]:
    """Every process to its end, all sampled meanwhile (each one's peak RSS)."""
    while any([proc.sample() for proc in procs]):  # noqa: C419 (sample every one, every round)
        time.sleep(0.5)
    return [proc.wait() for proc in procs]


def print_consume(gpus: int, rows: list[ConsumeRow], console: Console) -> None:
    table = Table(title=f"consuming the {gpus:,}-GPU topic to its end (one process, no group)")
    for column in ("client", "batch", "messages", "MB", "seconds", "MB/s"):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(
            r.client, f"{r.batch:,}", f"{r.messages:,}", f"{r.megabytes:,.0f}", f"{r.seconds:.1f}", f"{r.mb_per_s:,.0f}"
        )
    console.print(table)


def print_scale(runs: list[ScaleRun], interval_s: float, console: Console) -> None:
    live = any(r.tick_delay_s for r in runs)
    how = "published as it happens (values/s: the cluster's pace)" if live else "backlog drained"
    table = Table(title=f"split detection, {how}, through Kafka ({os.cpu_count()} cores, {interval_s:g} s scrapes)")
    columns = ["GPUs", "run", "values/s", "× real time", "× 1 member", "steady values/s", "× 1 member (steady)"]
    columns += ["peak RSS (MB)", "CPU s: members / root-cause / machine, of wall s"]
    columns += ["anomalies", "= offline", "incidents", "= offline"]
    if live:
        columns += ["lag max (s)", "tick delay p50 / p95 / max (s)"]
    for column in columns:
        table.add_column(column, justify="right")
    one = {r.gpus: r for r in runs if r.members == 1}
    for r in runs:
        first = one.get(r.gpus) if r.members else None
        cpu = r.cpu_s
        row = [
            f"{r.gpus:,}",
            "offline" if r.members == 0 else f"{r.members} member{'s' if r.members > 1 else ''}",
            f"{r.rate:,.0f}",
            f"{r.real_time(interval_s):.2f}",
            f"{r.rate / first.rate:.2f}" if first and first.rate else "",
            f"{r.steady_rate:,.0f}" if r.steady_rate else "",
            f"{r.steady_rate / first.steady_rate:.2f}" if first and first.steady_rate and r.steady_rate else "",
            " + ".join(f"{mb:,.0f}" for mb in r.peak_rss_mb),
            f"{cpu['members']:.0f} / {cpu['root-cause']:.0f} / {cpu['machine']:.0f}, of {r.wall_s:.0f}" if cpu else "",
            f"{r.anomalies:,}",
            "" if r.equal_to_offline is None else ("yes" if r.equal_to_offline else f"no: {r.differences}"),
            f"{r.incidents:,}",
            "" if r.incidents_equal is None else ("yes" if r.incidents_equal else f"no: {len(r.incident_differences)}"),
        ]
        if live:
            row += [f"{max(v for _, v in r.lag_s):.0f}" if r.lag_s else "", _delays(r.tick_delay_s)]
        table.add_row(*row)
    console.print(table)


def _delays(delays: list[float]) -> str:
    if not delays:
        return ""
    p50, p95 = (float(np.percentile(delays, q)) for q in (50, 95))
    return f"{p50:.1f} / {p95:.1f} / {max(delays):.1f}"


def lag_svg(runs: list[ScaleRun], width: int = 900, height: int = 300) -> str:
    """Each live run's lag (s) over the run: bounded, or growing."""
    live = [r for r in runs if r.lag_s]
    pad = 60
    t_max = max((t for r in live for t, _ in r.lag_s), default=1.0) or 1.0
    peak = max((v for r in live for _, v in r.lag_s), default=1.0) or 1.0
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]

    def x(t: float) -> float:
        return pad + (width - 2 * pad) * t / t_max

    def y(v: float) -> float:
        return 30 + (height - 70) * (1 - v / peak)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">']
    parts.append(f'<text x="{pad}" y="20" font-size="13">lag behind the cluster clock, s (max {peak:,.0f})</text>')
    parts.append(f'<rect x="{pad}" y="30" width="{width - 2 * pad}" height="{height - 70}" fill="none" stroke="#999"/>')
    for i, r in enumerate(live):
        colour = colours[i % len(colours)]
        points = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in r.lag_s)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>')
        label = f"{r.gpus:,} GPUs, {r.members} member{'s' if r.members > 1 else ''}"
        parts.append(f'<text x="{width - pad - 200}" y="{48 + 16 * i}" font-size="12" fill="{colour}">{label}</text>')
    parts.append(f'<text x="{width / 2:.0f}" y="{height - 12}" font-size="11">seconds into the run</text></svg>')
    return "\n".join(parts)


def run_scale(args: argparse.Namespace, console: Console) -> int:
    runs = scale(args, console)
    print_scale(runs, args.interval, console)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"cores": os.cpu_count(), "interval_s": args.interval, "ticks": args.ticks}
    record["runs"] = [
        {**asdict(r), "values_per_s": r.rate, "real_time": r.real_time(args.interval)}
        | {"steady_values_per_s": r.steady_rate}
        for r in runs
    ]
    record["consume"] = {
        str(gpus): [{**asdict(r), "mb_per_s": r.mb_per_s} for r in rows] for gpus, rows in args.consumed.items()
    }
    (out / "scale.json").write_text(json.dumps(record, indent=1) + "\n")
    if any(r.lag_s for r in runs):
        (out / "scale-lag.svg").write_text(lag_svg(runs))
    same = all(r.equal_to_offline is not False and r.incidents_equal is not False for r in runs)
    return 0 if same else 1


__all__ = ["ScaleRun", "print_scale", "run_scale", "scale"]
