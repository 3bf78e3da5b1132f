"""`aiops bench scale`: split detection at 10,000 and 100,000 GPUs through real Kafka, one
member against two.

Per size, the cluster (10 s scrapes, typical realism, the published fault rate, the predictor on)
is recorded to a folder and published whole to a fresh 6-partition topic first: the members then
drain a backlog, so what is measured is what detection can take per second, apart from the
generator's and the producer's CPU (which a real cluster does not spend on this machine). Then,
each in a fresh group and reading the same topic:
- offline: `aiops detect --input` over the folder, one process: the reference;
- 1 member, then 2 members: `aiops detect --kafka` processes started together, stopped when idle.

Per run: values per second (all values over the span from the first message any member took to
the last tick any member judged), that against real time (a cluster of this size makes
values/interval per second), peak RSS per member, and the anomalies and predictions published
compared with the offline run's as multisets. The machine's 2 cores are shared by the members, the
broker and this process (which only samples); the table says how many cores there were.

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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from aiops.bench_backlog import _jsonl, _multiset, _Process, _read
from aiops.bench_consume import ConsumeRow, bench_consume


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

    @property
    def rate(self) -> float:
        return self.values / self.seconds if self.seconds > 0 else 0.0

    def real_time(self, interval_s: float) -> float:
        """Times real time: values per second against what the cluster makes per second."""
        made_per_s = self.values / max(self.ticks, 1) / interval_s
        return self.rate / made_per_s if made_per_s else 0.0


def _topic_keys() -> list[str]:
    from vocab.settings import KafkaSettings

    return [key for key in KafkaSettings.model_fields if key.endswith("_topic")]


def scale(args: argparse.Namespace, console: Console) -> list[ScaleRun]:
    from aiops.cli import _settings
    from ingest.kafka_io import ensure_topics

    bootstrap = _settings(argparse.Namespace()).kafka.bootstrap
    run_id = f"scale-{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:4]}"
    work = Path(args.work) / run_id
    work.mkdir(parents=True)
    runs: list[ScaleRun] = []
    consumed: dict[int, list[ConsumeRow]] = {}
    args.consumed = consumed
    predict = [] if args.predict else ["--no-predict"]
    for gpus in args.sizes:
        folder = work / f"cluster-{gpus}"
        hours = args.ticks * args.interval / 3600
        gen = ["gen", "--gpus", str(gpus), "--hours", f"{hours:.6f}", "--interval", str(args.interval)]
        gen += ["--seed", str(args.seed), "--realism", "typical", "--faults", args.faults, "--out", str(folder)]
        console.print(f"[bold]scale[/] {gpus:,} GPUs: {args.ticks} ticks at {args.interval:g} s -> {folder}")
        if _Process(gen, dict(os.environ), work / "gen.log").wait() != 0:
            raise RuntimeError(f"aiops gen failed: see {work / 'gen.log'}")
        topic = f"{run_id}.telemetry.{gpus}"
        ensure_topics(bootstrap, [topic], partitions=args.partitions)
        produce = ["produce", str(folder / "telemetry.lp"), "--topic", topic, "--partitions", str(args.partitions)]
        if _Process(produce, dict(os.environ), work / "produce.log").wait() != 0:
            raise RuntimeError(f"aiops produce failed: see {work / 'produce.log'}")
        if args.consume:
            consumed[gpus] = bench_consume(bootstrap, topic, args.consume)
            print_consume(gpus, consumed[gpus], console)

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
        runs.append(reference)
        expected = (_multiset(anomalies), _multiset(predictions))

        for members in args.members:
            name = f"{gpus}-{members}"
            env = {
                **os.environ,
                **{f"AIOPS_KAFKA__{k.upper()}": f"{run_id}.{name}.{k.removesuffix('_topic')}" for k in _topic_keys()},
                "AIOPS_KAFKA__TELEMETRY_TOPIC": topic,
                "AIOPS_KAFKA__DETECT_GROUP": f"{run_id}-{name}",
                "AIOPS_STATE_DIR": str(work / "state" / name),
                "OMP_NUM_THREADS": "1",
            }
            detect = ["detect", "--kafka", bootstrap, "--interval", str(args.interval), "--events"]
            detect += [str(folder / "events.jsonl"), "--stop-when-idle", str(args.idle_stop_s), *predict]
            procs = [
                _Process(
                    [*detect, "--stats", str(work / f"stats-{name}-{i}.json")], env, work / f"member-{name}-{i}.log"
                )
                for i in range(members)
            ]
            codes = _wait_all(procs)
            if any(codes):
                raise RuntimeError(f"a member failed ({codes}): see {work}/member-{name}-*.log")
            stats = [json.loads((work / f"stats-{name}-{i}.json").read_text()) for i in range(members)]
            run = ScaleRun(gpus, members, args.ticks, values=sum(int(s["values"]) for s in stats))
            firsts = [s["first_message_at"] for s in stats if s["first_message_at"]]
            lasts = [s["last_judged_at"] for s in stats if s["last_judged_at"]]
            # less the time the members waited to call the input quiet (the last ticks are held
            # for late rows until then): a live cluster never goes quiet
            idle = min((float(s["idle_wait_s"]) for s in stats if s["last_judged_at"]), default=0.0)
            run.seconds = max(lasts) - min(firsts) - idle if firsts and lasts else 0.0
            run.peak_rss_mb = [proc.peak_mb for proc in procs]
            got_anomalies = _read(bootstrap, env["AIOPS_KAFKA__ANOMALIES_TOPIC"])
            got_predictions = _read(bootstrap, env["AIOPS_KAFKA__PREDICTIONS_TOPIC"])
            run.anomalies, run.predictions = len(got_anomalies), len(got_predictions)
            got = (_multiset(got_anomalies), _multiset(got_predictions))
            run.equal_to_offline = got == expected
            if not run.equal_to_offline:
                missing = sum(((expected[0] - got[0]) + (expected[1] - got[1])).values())
                extra = sum(((got[0] - expected[0]) + (got[1] - expected[1])).values())
                run.differences = f"{missing} missing, {extra} not offline"
            runs.append(run)
            console.print(f"  {members} member(s): {run.rate:,.0f} values/s, equal to offline: {run.equal_to_offline}")
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return runs


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
    table = Table(
        title=f"split detection, backlog drained through Kafka ({os.cpu_count()} cores, {interval_s:g} s scrapes)"
    )
    for column in ("GPUs", "run", "values/s", "× real time", "× 1 member", "peak RSS (MB)", "anomalies", "= offline"):
        table.add_column(column, justify="right")
    one: dict[int, float] = {r.gpus: r.rate for r in runs if r.members == 1}
    for r in runs:
        table.add_row(
            f"{r.gpus:,}",
            "offline" if r.members == 0 else f"{r.members} member{'s' if r.members > 1 else ''}",
            f"{r.rate:,.0f}",
            f"{r.real_time(interval_s):.2f}",
            f"{r.rate / one[r.gpus]:.2f}" if r.members and one.get(r.gpus) else "",
            " + ".join(f"{mb:,.0f}" for mb in r.peak_rss_mb),
            f"{r.anomalies:,}",
            "" if r.equal_to_offline is None else ("yes" if r.equal_to_offline else f"no: {r.differences}"),
        )
    console.print(table)


def run_scale(args: argparse.Namespace, console: Console) -> int:
    runs = scale(args, console)
    print_scale(runs, args.interval, console)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"cores": os.cpu_count(), "interval_s": args.interval, "ticks": args.ticks}
    record["runs"] = [{**asdict(r), "values_per_s": r.rate, "real_time": r.real_time(args.interval)} for r in runs]
    record["consume"] = {
        str(gpus): [{**asdict(r), "mb_per_s": r.mb_per_s} for r in rows] for gpus, rows in args.consumed.items()
    }
    (out / "scale.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0 if all(r.equal_to_offline is not False for r in runs) else 1


__all__ = ["ScaleRun", "print_scale", "run_scale", "scale"]
