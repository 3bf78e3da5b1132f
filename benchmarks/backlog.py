"""`aiops bench backlog`: the daemons started behind a backlog, at a size the suite cannot afford.

The whole recording (by default 4,096 GPUs, 6 hours at 30 s) is published to a 6-partition topic
before a daemon starts, as after a long outage or a deployment onto a topic that already holds
data. Then, each in a fresh consumer group:
- `aiops run --kafka` catches up the whole backlog;
- `aiops run --kafka` is SIGKILLed a while after its first incident and started again;
- `aiops detect --kafka` catches up the whole backlog;
and what each published is compared with the offline run of the same folder (incidents id for
id, anomalies as a multiset). Memory: each daemon's peak RSS while catching up, against the
steady state, which is the same daemon following the same cluster live (its first hour, paced by
`aiops gen --kafka` so that every partition advances together), at its peak.

Prints a table and writes `backlog.json` to `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from aiops.progress_bar import track
from benchmarks.soak import by_incident, cpu_seconds, incident_differences, status_mb


@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    peak_rss_mb: float = 0.0
    exit_codes: list[int] = field(default_factory=list)
    incidents: int = 0  # distinct incidents published (root-cause daemon)
    anomalies: int = 0
    differences: list[str] = field(default_factory=list)


@dataclass
class BacklogReport:
    gpus: int
    hours: float
    interval_s: float
    values: int = 0
    offline_incidents: int = 0
    offline_anomalies: int = 0
    offline_peak_rss_mb: float = 0.0
    steady_peak_rss_mb: float = 0.0
    phases: list[Phase] = field(default_factory=list)


class _Process:
    """A command of ours as a process, its peak RSS and CPU time sampled until it ends (the
    CPU of its last half second is not seen)."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self._log = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "aiops.cli", *argv], env=env, stdout=self._log, stderr=self._log
        )
        self.peak_mb = 0.0
        self.cpu_s = 0.0
        self.started = time.monotonic()

    def sample(self) -> bool:
        """Whether it still runs (its peak and CPU time updated)."""
        peak = status_mb(self.proc.pid, "VmHWM")
        if peak is not None:
            self.peak_mb = max(self.peak_mb, peak)
        cpu = cpu_seconds(self.proc.pid)
        if cpu is not None and self.proc.poll() is None:  # a zombie's stat is no longer its own
            self.cpu_s = max(self.cpu_s, cpu)
        return self.proc.poll() is None

    def wait(self, timeout_s: float = 7200.0) -> int:
        deadline = time.monotonic() + timeout_s
        while self.sample():
            if time.monotonic() > deadline:
                self.proc.kill()
            time.sleep(0.5)
        self._log.close()
        return int(self.proc.returncode)


def _read(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    from ingest.kafka import whole_topic

    return [json.loads(r.value) for r in whole_topic(bootstrap, topic)]


def _anomalies(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """The anomalies on the topic, without the presence records split detection publishes beside
    them (detectors/anomaly.py: who stopped or started reporting, for the engine; an offline run
    writes none to anomalies.jsonl)."""
    from detectors.anomaly import PRESENCE_BACK, PRESENCE_GONE

    return [r for r in _read(bootstrap, topic) if r.get("detector") not in (PRESENCE_GONE, PRESENCE_BACK)]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _multiset(records: list[dict[str, Any]]) -> Counter[str]:
    return Counter(json.dumps(r, sort_keys=True) for r in records)


def backlog(args: argparse.Namespace, console: Console) -> BacklogReport:
    from aiops.cli.common import settings_from
    from ingest.kafka import ensure_topics

    bootstrap = settings_from(argparse.Namespace()).kafka.bootstrap
    run_id = f"backlog-{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:4]}"
    work = Path(args.work) / run_id
    work.mkdir(parents=True)
    gen = [
        "--gpus",
        str(args.gpus),
        "--interval",
        str(args.interval),
        "--seed",
        str(args.seed),
        "--faults",
        args.faults,
    ]
    report = BacklogReport(args.gpus, args.hours, args.interval)
    console.print(f"[bold]backlog[/] {run_id}: {args.gpus:,} GPUs, {args.hours:g} h at {args.interval:g} s; in {work}")

    def env_for(name: str) -> dict[str, str]:
        topics = {key: f"{run_id}.{name}.{key.removesuffix('_topic')}" for key in _topic_keys()}
        return {
            **os.environ,
            **{f"AIOPS_KAFKA__{k.upper()}": v for k, v in topics.items()},
            "AIOPS_KAFKA__DETECT_GROUP": f"{run_id}-{name}-detect",
            "AIOPS_STATE_DIR": str(work / "state" / name),
            "AIOPS_CHECKPOINT_EVERY_S": str(args.checkpoint_every_s),
            "OMP_NUM_THREADS": "1",
        }

    def step(what: str, argv: list[str], env: dict[str, str] | None = None) -> _Process:
        console.print(f"  {what}")
        p = _Process(argv, env or dict(os.environ), work / f"{what.split(maxsplit=1)[0]}.log")
        if p.wait():
            raise RuntimeError(f"{what} failed; see {work}")
        return p

    recorded, offline, side = work / "recorded", work / "offline", work / "side"
    step("gen the recording", ["gen", *gen, "--hours", str(args.hours), "--out", str(recorded)])
    ran = step("offline run (the reference)", ["run", "--input", str(recorded), "--out", str(offline), "--no-predict"])
    report.offline_peak_rss_mb = ran.peak_mb
    stats = json.loads((offline / "run.json").read_text())
    report.values = int(stats["values"])
    detected = work / "detected"
    step("offline detect (its reference)", ["detect", "--input", str(recorded), "--out", str(detected), "--no-predict"])
    expected_incidents = by_incident(_jsonl(offline / "incidents.jsonl"))
    expected_anomalies = _multiset(_jsonl(offline / "anomalies.jsonl"))
    expected_detected = _multiset(_jsonl(detected / "anomalies.jsonl"))
    report.offline_incidents, report.offline_anomalies = len(expected_incidents), sum(expected_anomalies.values())

    def daemon(name: str, context: Path = recorded) -> list[str]:
        """The command line of a daemon reading the topics of `name`, with its cluster's context."""
        events = ["--events", str(context / "events.jsonl"), "--no-predict", "--stop-when-idle", "20"]
        if name == "detect":
            return ["detect", "--kafka", bootstrap, "--interval", str(args.interval), *events]
        topology = ["--topology", str(context / "topology.json"), "--group", f"{run_id}-{name}"]
        return ["run", "--kafka", bootstrap, "--interval", str(args.interval), *topology, *events]

    # the steady state: the same daemon following the cluster's first hour live
    env = env_for("steady")
    step("gen the first hour's context", ["gen", *gen, "--hours", "1", "--out", str(side)])
    ensure_topics(bootstrap, [env["AIOPS_KAFKA__TELEMETRY_TOPIC"]])
    live = _Process(daemon("steady", side), env, work / "steady.log")
    console.print(f"  steady state: the first hour paced at {args.speed:g}x")
    pacer = _Process(
        ["gen", *gen, "--hours", "1", "--kafka", bootstrap, "--speed", str(args.speed)], env, work / "pacer.log"
    )
    pacer.wait()
    live.wait()
    report.steady_peak_rss_mb = live.peak_mb
    shutil.rmtree(side)

    for name in track(("run", "run-killed", "detect"), "aiops bench backlog: catching up", "daemons"):
        env = env_for(name)
        topic = env["AIOPS_KAFKA__TELEMETRY_TOPIC"]
        step(f"publish the backlog ({name})", ["produce", str(recorded / "telemetry.lp"), "--topic", topic], env)
        phase = Phase(name)
        began = time.monotonic()
        argv = daemon(name)
        console.print(f"  {name}: catching up")
        first = _Process(argv, env, work / f"{name}.log")
        if name == "run-killed":
            incidents_topic = env["AIOPS_KAFKA__INCIDENTS_TOPIC"]
            while first.sample() and not _read(bootstrap, incidents_topic):
                time.sleep(1)
            time.sleep(args.kill_after_s)
            first.proc.kill()
            console.print(f"  {name}: SIGKILL after {time.monotonic() - began:.0f} s; started again")
        phase.exit_codes.append(first.wait())
        phase.peak_rss_mb = first.peak_mb
        if name == "run-killed":
            again = _Process(argv, env, work / f"{name}.log")
            phase.exit_codes.append(again.wait())
            phase.peak_rss_mb = max(phase.peak_rss_mb, again.peak_mb)
        phase.seconds = time.monotonic() - began
        anomalies = _multiset(_anomalies(bootstrap, env["AIOPS_KAFKA__ANOMALIES_TOPIC"]))
        phase.anomalies = sum(anomalies.values())
        reference = expected_detected if name == "detect" else expected_anomalies
        missing, extra = reference - anomalies, anomalies - reference
        if missing or extra:
            phase.differences.append(f"anomalies: {sum(missing.values())} missing, {sum(extra.values())} extra")
        if name != "detect":
            streamed = by_incident(_read(bootstrap, env["AIOPS_KAFKA__INCIDENTS_TOPIC"]))
            phase.incidents = len(streamed)
            phase.differences += incident_differences(streamed, expected_incidents)
        report.phases.append(phase)
    if not args.keep:
        shutil.rmtree(recorded)  # gigabytes at this size
    return report


def _topic_keys() -> list[str]:
    from vocab.settings import KafkaSettings

    return [key for key in KafkaSettings.model_fields if key.endswith("_topic")]


def bench_backlog(args: argparse.Namespace, console: Console) -> BacklogReport:
    report = backlog(args, console)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "backlog.json").write_text(json.dumps(asdict(report), indent=1) + "\n")
    table = Table(
        title=f"aiops bench backlog: {report.gpus:,} GPUs, {report.hours:g} h at {report.interval_s:g} s "
        f"({report.values:,} values) in the topic before the daemon starts"
    )
    for column in ("daemon", "caught up in", "values/s", "peak RSS", "vs steady", "incidents", "anomalies", "differ"):
        table.add_column(column, justify="left" if column == "daemon" else "right")
    steady = report.steady_peak_rss_mb or float("nan")
    table.add_row(
        "offline run (reference)", "", "", f"{report.offline_peak_rss_mb:,.0f} MB", "",
        str(report.offline_incidents), f"{report.offline_anomalies:,}", "",
    )  # fmt: skip
    table.add_row(
        "run --kafka, live (steady state)", "", "", f"{report.steady_peak_rss_mb:,.0f} MB", "1.00x", "", "", ""
    )
    for p in report.phases:
        table.add_row(
            f"{p.name}{' (exit ' + ','.join(map(str, p.exit_codes)) + ')' if p.exit_codes[-1] else ''}",
            f"{p.seconds:,.0f} s",
            f"{report.values / p.seconds:,.0f}" if p.seconds else "",
            f"{p.peak_rss_mb:,.0f} MB",
            f"{p.peak_rss_mb / steady:.2f}x",
            str(p.incidents) if p.name != "detect" else "",
            f"{p.anomalies:,}",
            str(len(p.differences)),
        )
    console.print(table, width=160)  # (a pipe gives rich 80 columns: the table would fold)
    for p in report.phases:
        for line in p.differences[:10]:
            console.print(f"  {p.name}: {line}")
    console.print(f"written {out / 'backlog.json'}")
    return report
