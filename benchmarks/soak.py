"""`aiops bench soak`: the daemons left running under a 10,000-GPU cluster's stream, with faults.

A benchmark, not a test (it takes as long as it is told to, 30 minutes by default): on loopback,
against the services `scripts/services` runs, `aiops gen --kafka` paces a cluster in real time
(10,000 GPUs at 10 s is about 64k values/s) while `aiops ingest` writes to InfluxDB and
`aiops run --kafka` analyses it. Early on, each daemon is killed (SIGKILL) and started again and
the broker is restarted, so the last two thirds run undisturbed: RSS over that stretch says
whether memory creeps. Every few seconds it samples each daemon's RSS and its group's lag (end
offsets minus committed offsets). At the end it runs the same cluster offline and compares the
incidents published on the topic with the offline run's, id for id.

Prints a table and writes `soak.json` and `soak.svg` (RSS and lag over time) to `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import requests
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Sample:
    t: float  # seconds since the start
    rss_mb: dict[str, float | None]  # daemon -> resident set size
    lag: dict[str, int | None]  # daemon -> its group's lag in messages (None: broker away)


@dataclass
class Fault:
    at: float
    what: str
    # from the fault until both groups were back at their steady lag: none for ingest (it commits
    # what it wrote), and for the root-cause daemon the messages of the ticks it holds for late
    # rows by design (its `--lateness`), taken as the most it showed before the first fault
    lag_zero_after_s: float | None = None


@dataclass
class SoakReport:
    minutes: float
    gpus: int
    interval_s: float
    values: int = 0
    samples: list[Sample] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    incidents_streamed: int = 0
    incidents_offline: int = 0
    differences: list[str] = field(default_factory=list)
    exits: dict[str, int | None] = field(default_factory=dict)
    died: list[str] = field(default_factory=list)  # daemons that exited on their own


def status_mb(pid: int, key: str = "VmRSS") -> float | None:
    """A memory figure of /proc/<pid>/status in MB (VmRSS: resident now, VmHWM: its peak so
    far); None once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def cpu_seconds(pid: int | None = None) -> float | None:
    """CPU time (user + system, s) of a process from /proc/<pid>/stat, or, without a pid, of
    the whole machine (every core's busy time, /proc/stat); None once the process is gone."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        if pid is None:
            fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
            return (user + nice + system + irq + softirq + steal) / tick
        # the command name (field 2) may hold spaces: fields count from after its ")"
        after = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(after[11]) + int(after[12])) / tick  # utime, stime: fields 14 and 15
    except (OSError, IndexError, ValueError):
        return None


def group_lag(bootstrap: str, topic: str, groups: dict[str, str]) -> dict[str, int | None]:
    """Per daemon, messages on the topic its group has not committed."""
    from ingest.kafka import group_lag as lag

    return lag(bootstrap, topic, groups)


def restart_broker(down_s: float) -> None:
    """Stop the broker `scripts/services` runs as an operator's restart does (SIGTERM), keep it
    down for `down_s`, start it again."""
    cache = Path(os.environ.get("AIOPS_CACHE", Path.home() / ".cache" / "aiops"))
    pid = int((Path(os.environ.get("AIOPS_STATE", cache / "run")) / "kafka.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    for _ in range(300):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    time.sleep(down_s)
    # the broker outlives this process: its output goes to a file, not to a pipe that would break
    # (SIGPIPE) when the caller exits
    with tempfile.TemporaryFile() as out:
        command = [str(ROOT / "scripts" / "services"), "up"]
        done = subprocess.run(command, check=False, stdout=out, stderr=out, timeout=300)
        if done.returncode:
            out.seek(0)
            raise RuntimeError(f"scripts/services up failed: {out.read().decode(errors='replace')[-2000:]}")


def by_incident(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each incident's successive states (Kafka keeps order per key, not across keys)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        out.setdefault(r["incident_id"], []).append(r)
    return out


def incident_differences(a: dict[str, list[dict[str, Any]]], b: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Where two runs' incidents differ: ids in one only, state counts, and field by field."""
    out = [f"{i}: only in one" for i in sorted(set(a) ^ set(b))]
    for i in sorted(set(a) & set(b)):
        if len(a[i]) != len(b[i]):
            out.append(f"{i}: {len(a[i])} states vs {len(b[i])}")
        for n, (x, y) in enumerate(zip(a[i], b[i], strict=False)):
            out += [
                f"{i}[{n}].{k}: {x.get(k)!r} != {y.get(k)!r}" for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)
            ]
    return out


def _read_topic(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    from ingest.kafka import whole_topic

    return [json.loads(r.value) for r in whole_topic(bootstrap, topic)]


def soak(args: argparse.Namespace, console: Console) -> SoakReport:
    from aiops.cli.common import settings_from
    from ingest.kafka import ensure_topics

    settings = settings_from(argparse.Namespace())
    bootstrap = settings.kafka.bootstrap
    run_id = f"soak-{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:4]}"
    work = Path(args.work) / run_id
    work.mkdir(parents=True)
    names = [key for key in type(settings.kafka).model_fields if key.endswith("_topic")]
    topics = {key: f"{run_id}.{key.removesuffix('_topic')}" for key in names}
    groups = {"ingest": f"{run_id}-ingest", "run": f"{run_id}-run"}
    database = run_id.replace("-", "_")
    env = {
        **os.environ,
        **{f"AIOPS_KAFKA__{k.upper()}": v for k, v in topics.items()},
        "AIOPS_INFLUX__DATABASE": database,
        "AIOPS_STATE_DIR": str(work / "state"),
        "AIOPS_SCRAPE_INTERVAL_S": str(args.interval),
    }
    requests.post(f"{settings.influx.url}/query", params={"q": f'CREATE DATABASE "{database}"'}, timeout=30)
    ensure_topics(bootstrap, [topics["telemetry_topic"]])
    gen_args = ["--gpus", str(args.gpus), "--interval", str(args.interval), "--seed", str(args.seed)]
    gen_args += ["--hours", str(args.minutes / 60), "--faults", args.faults]
    predict = ["--no-predict"] if args.no_predict else []
    side = work / "side"

    def aiops(*argv: str, log: str) -> subprocess.Popen[bytes]:
        out = (work / f"{log}.log").open("ab")
        return subprocess.Popen([sys.executable, "-m", "aiops.cli", *argv], env=env, stdout=out, stderr=out)

    def start(name: str) -> subprocess.Popen[bytes]:
        if name == "ingest":
            return aiops("ingest", "--group", groups["ingest"], log="ingest")
        daemon = ["run", "--kafka", bootstrap, "--topology", str(side / "topology.json"), "--events"]
        daemon += [str(side / "events.jsonl"), "--group", groups["run"], *predict]
        return aiops(*daemon, log="run")

    # the schedule (jobs, maintenance) is only complete once the whole cluster was generated:
    # generate it once to a folder for the root-cause daemon, keep topology and events
    subprocess.run(
        [sys.executable, "-m", "aiops.cli", "gen", *gen_args, "--out", str(side)],
        env=env,
        check=True,
        capture_output=True,
    )
    (side / "telemetry.lp").unlink()
    gen = aiops("gen", *gen_args, "--kafka", bootstrap, "--speed", "1", log="gen")
    daemons = {"ingest": start("ingest"), "run": start("run")}
    report = SoakReport(args.minutes, args.gpus, args.interval)
    began = time.monotonic()
    duration = args.minutes * 60
    # faults early, so the last two thirds show the steady state
    plan = [(0.13 * duration, "SIGKILL ingest"), (0.20 * duration, "SIGKILL run"), (0.27 * duration, "broker restart")]
    console.print(
        f"[bold]soak[/] {run_id}: {args.gpus:,} GPUs at {args.interval:g} s for {args.minutes:g} min; logs in {work}"
    )
    next_sample = 0.0
    drained_since: float | None = None

    def caught_up(lag: dict[str, int | None]) -> bool:
        steady = dict.fromkeys(lag, 0)
        first_fault = report.faults[0].at if report.faults else float("inf")
        for sample in report.samples:
            if sample.t < first_fault:
                for name, v in sample.lag.items():
                    steady[name] = max(steady[name], v or 0) if name == "run" else 0
        return all(v is not None and v <= steady[name] for name, v in lag.items())

    while True:
        now = time.monotonic() - began
        if plan and now >= plan[0][0]:
            _, what = plan.pop(0)
            console.print(f"{now:7.0f} s  {what}")
            report.faults.append(Fault(now, what))
            if what.startswith("SIGKILL"):
                name = what.split()[1]
                daemons[name].kill()
                daemons[name].wait()
                time.sleep(5)
                daemons[name] = start(name)
            else:
                restart_broker(args.broker_down_s)
        if now >= next_sample:
            next_sample = now + args.sample_s
            rss = {name: status_mb(p.pid) for name, p in daemons.items()}
            lag = group_lag(bootstrap, topics["telemetry_topic"], groups)
            report.samples.append(Sample(now, rss, lag))
            for fault in report.faults:
                if fault.lag_zero_after_s is None and caught_up(lag) and now > fault.at + 5:
                    fault.lag_zero_after_s = now - fault.at
            drained = gen.poll() is not None and all(v == 0 for v in lag.values())
            drained_since = (drained_since or now) if drained else None
            if drained_since is not None and now - drained_since >= 30:
                break
            if now > duration + args.drain_timeout_s:
                console.print("[red]the daemons did not drain the stream in time[/]")
                break
        died = [name for name, p in daemons.items() if p.poll() is not None]
        if died:
            for name in died:
                console.print(f"[red]{name} exited ({daemons[name].returncode}) on its own[/]; see {work / name}.log")
                report.died.append(name)
            break
        time.sleep(1)
    gen.terminate()
    for p in daemons.values():
        p.send_signal(signal.SIGTERM)
    report.exits = {name: p.wait(timeout=120) for name, p in daemons.items()}
    streamed = by_incident(_read_topic(bootstrap, topics["incidents_topic"]))

    # the same cluster offline: the reference the daemons must equal
    recorded = work / "recorded"
    subprocess.run([sys.executable, "-m", "aiops.cli", "gen", *gen_args, "--out", str(recorded)], env=env, check=True)
    offline = work / "offline"
    subprocess.run(
        [sys.executable, "-m", "aiops.cli", "run", "--input", str(recorded), "--out", str(offline), *predict],
        env=env,
        check=True,
        capture_output=True,
    )
    shutil.rmtree(recorded)  # gigabytes at this size
    lines = (offline / "incidents.jsonl").read_text().splitlines()
    expected = by_incident([json.loads(line) for line in lines if line.strip()])
    report.incidents_streamed, report.incidents_offline = len(streamed), len(expected)
    report.differences = incident_differences(streamed, expected)
    return report


def _svg(report: SoakReport, width: int = 900, height: int = 420) -> str:
    """RSS (MB) of each daemon and its group's lag (messages) over time, faults marked."""
    pad, half = 60, (height - 60) // 2
    t_max = max((s.t for s in report.samples), default=1.0) or 1.0
    colours = {"ingest": "#1f77b4", "run": "#d62728"}

    def x(t: float) -> float:
        return pad + (width - 2 * pad) * t / t_max

    def panel(top: int, title: str, series: dict[str, list[tuple[float, float]]]) -> list[str]:
        peak = max((v for points in series.values() for _, v in points), default=1.0) or 1.0
        out = [f'<text x="{pad}" y="{top - 8}" font-size="13">{title} (max {peak:,.0f})</text>']
        out.append(
            f'<rect x="{pad}" y="{top}" width="{width - 2 * pad}" height="{half - 30}" fill="none" stroke="#999"/>'
        )
        for name, points in series.items():
            path = " ".join(f"{x(t):.1f},{top + (half - 30) * (1 - v / peak):.1f}" for t, v in points)
            out.append(f'<polyline fill="none" stroke="{colours[name]}" stroke-width="1.5" points="{path}"/>')
        return out

    rss = {n: [(s.t, v) for s in report.samples if (v := s.rss_mb.get(n)) is not None] for n in colours}
    lag = {n: [(s.t, float(v)) for s in report.samples if (v := s.lag.get(n)) is not None] for n in colours}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">']
    parts += panel(30, "RSS, MB", rss)
    parts += panel(30 + half, "lag, messages", lag)
    for fault in report.faults:
        parts.append(
            f'<line x1="{x(fault.at):.1f}" y1="30" x2="{x(fault.at):.1f}" y2="{height - 30}" '
            'stroke="#888" stroke-dasharray="4"/>'
        )
        parts.append(f'<text x="{x(fault.at) + 3:.1f}" y="{height - 16}" font-size="11">{fault.what}</text>')
    for i, (name, colour) in enumerate(colours.items()):
        parts.append(f'<text x="{width - pad - 120 + 60 * i}" y="18" font-size="12" fill="{colour}">{name}</text>')
    parts.append(f'<text x="{width / 2:.0f}" y="{height - 2}" font-size="11">seconds</text></svg>')
    return "\n".join(parts)


def _growth(report: SoakReport, name: str, last_s: float) -> float | None:
    """RSS growth of a daemon over the last `last_s` seconds, as a fraction of where it began."""
    t_end = report.samples[-1].t if report.samples else 0.0
    window = [(s.t, s.rss_mb.get(name)) for s in report.samples if s.t >= t_end - last_s]
    values = [v for _, v in window if v is not None]
    if len(values) < 2:
        return None
    return (values[-1] - values[0]) / values[0]


def bench_soak(args: argparse.Namespace, console: Console) -> SoakReport:
    report = soak(args, console)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(asdict(report), indent=1) + "\n")
    (out / "soak.svg").write_text(_svg(report))
    table = Table(title=f"aiops bench soak: {report.gpus:,} GPUs at {report.interval_s:g} s, {report.minutes:g} min")
    table.add_column("what")
    table.add_column("result", justify="right")
    for fault in report.faults:
        after = "never" if fault.lag_zero_after_s is None else f"{fault.lag_zero_after_s:.0f} s"
        table.add_row(f"{fault.what} at {fault.at:.0f} s: lag back to steady after", after)
    last = min(20 * 60, report.minutes * 60 * 2 / 3)
    for name in ("ingest", "run"):
        g = _growth(report, name, last)
        table.add_row(f"{name}: RSS growth over the last {last / 60:.0f} min", "n/a" if g is None else f"{g:+.1%}")
    table.add_row("incidents streamed / offline", f"{report.incidents_streamed} / {report.incidents_offline}")
    table.add_row("incidents that differ from offline", str(len(report.differences)))
    table.add_row("daemon exit codes on SIGTERM", ", ".join(f"{n} {c}" for n, c in report.exits.items()))
    table.add_row("daemons that exited on their own", ", ".join(report.died) or "none")
    console.print(table)
    for line in report.differences[:20]:
        console.print(f"  {line}")
    console.print(f"written {out / 'soak.json'} and {out / 'soak.svg'}")
    return report
