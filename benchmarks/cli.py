"""`aiops bench ...`: the benches' own subcommand, a plugin of the `aiops` command line. The
product does not import the benches: pyproject.toml registers `add_parsers` under the
`aiops.commands` entry point group, and `aiops` adds what that group names when it builds its
parser (aiops/cli/commands.py). Each bench's code is imported only when it runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

# the NAB corpus in the shared datasets beside the checkout
NAB = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "nab"


def add_parsers(sub: Any) -> None:
    """`aiops bench NAME`, a subcommand per bench (what the `aiops.commands` entry point names)."""
    p = sub.add_parser("bench", help="benchmarks that print tables")
    bench = p.add_subparsers(dest="bench", required=True)
    for add in (
        _add_ingest,
        _add_store,
        _add_gen,
        _add_detect,
        _add_nab,
        _add_rca,
        _add_goodput,
        _add_soak,
        _add_backlog,
        _add_scale,
        _add_dashboards,
        _add_hostile_poll,
    ):
        add(bench)
    p.set_defaults(handler=cmd_bench)


def _add_ingest(bench: Any) -> None:
    b = bench.add_parser("ingest", help="decode, Kafka and InfluxDB throughput")
    b.add_argument("--gpus", type=int, default=10_000, help="cluster size of the synthetic tick")
    b.add_argument("--ticks", type=int, default=3, help="ticks through Kafka and InfluxDB")
    b.add_argument("--repeat", type=int, default=5, help="decode repetitions (best is reported)")
    b.add_argument("--kafka", metavar="HOST:PORT", help="also measure Kafka end to end")
    b.add_argument("--influx", metavar="URL", help="also measure InfluxDB writes")


def _add_store(bench: Any) -> None:
    b = bench.add_parser("store", help="InfluxDB at full resolution and downsampled vs what 10k/100k GPUs need")
    b.add_argument("--influx", metavar="URL", default="http://127.0.0.1:8086")
    b.add_argument("--gpus", type=int, default=1024, help="cluster size written to InfluxDB")
    b.add_argument("--minutes", type=float, default=5.0, help="cluster time written (whole windows)")
    b.add_argument("--interval", type=float, default=10.0, help="scrape interval, seconds")
    b.add_argument("--window", type=float, default=60.0, help="downsampling window, seconds")
    b.add_argument("--repeat", type=int, default=3, help="downsampler runs (best is reported)")
    b.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="cluster sizes to size for")
    b.add_argument("--out", help="also write the figures as JSON here")


def _add_gen(bench: Any) -> None:
    b = bench.add_parser("gen", help="generator throughput and topology sizes")
    b.add_argument("--sizes", type=int, nargs="+", default=[1024, 10_000, 100_000], help="cluster sizes in GPUs")
    b.add_argument("--ticks", type=int, default=4, help="ticks per size")
    b.add_argument("--kafka", metavar="HOST:PORT", help="also publish to Kafka")
    b.add_argument("--kafka-max-gpus", type=int, default=10_000, help="largest size sent to Kafka")


def _add_detect(bench: Any) -> None:
    b = bench.add_parser("detect", help="detector stack throughput and state, beside river and pysad")
    b.add_argument("--gpus", type=int, default=10_000)
    b.add_argument(
        "--realism", choices=["clean", "typical", "harsh"], default="typical", help="the fleet noise in the stream"
    )
    b.add_argument("--ticks", type=int, default=5)
    b.add_argument("--peer-samples", type=int, default=20_000, help="samples fed to each one-at-a-time library")


def _add_nab(bench: Any) -> None:
    b = bench.add_parser(
        "nab", help="NAB scores of the series detector, settings chosen out of fold (a NAB-layout folder)"
    )
    b.add_argument("--data", default=str(NAB))
    b.add_argument("--out", help="also write the figures as JSON here")


def _add_rca(bench: Any) -> None:
    b = bench.add_parser("rca", help="root-cause ranking latency per tick: trickle, a leaf going down, a PFC storm")
    b.add_argument("--sizes", type=int, nargs="+", default=[1024, 10_000, 100_000], help="cluster sizes in GPUs")
    b.add_argument("--repeat", type=int, default=3, help="runs per size, fresh engine each (first: cold caches)")
    b.add_argument("--background-ticks", type=int, default=20, help="ticks of unrelated anomalies before a burst")
    b.add_argument("--seed", type=int, default=1)


def _add_goodput(bench: Any) -> None:
    b = bench.add_parser("goodput", help="GPU-hours lost with and without acting (drains on failures, on predictions)")
    b.add_argument("--gpus", type=int, default=4096)
    b.add_argument("--hours", type=float, default=48.0)
    b.add_argument("--interval", type=float, default=60.0)
    b.add_argument("--seeds", type=int, nargs="+", default=[2801, 2802])
    b.add_argument("--restart-s", type=float, default=600.0, help="a job's restart after an interruption (assumed)")
    b.add_argument("--human-s", type=float, default=1800.0, help="none: a person drains a failed node this long after")
    b.add_argument("--horizon-h", type=float, default=12.0, help="a drain with no fault this long after it is wrong")
    b.add_argument("--max-nodes", type=int, default=8, help="the breaker: nodes out of service per hour")
    b.add_argument("--max-fraction", type=float, default=0.02, help="the breaker: share of the cluster per hour")
    b.add_argument("--faults", help="a generator fault spec (e.g. all=1) instead of the Llama 3 rate")
    b.add_argument("--big-gpus", type=int, default=10_000, help="the large job whose ETTR is reported")
    b.add_argument("--big-ckpt-s", type=float, default=1800.0, help="the large job's checkpoint period")
    b.add_argument("--cache", default=None, help="keep each history's replay here (a rerun of the acting side is fast)")
    b.add_argument("--out", help="also write the figures as JSON here")


def _add_soak(bench: Any) -> None:
    b = bench.add_parser(
        "soak", help="the daemons under a 10,000-GPU stream for 30 min, with kills and a broker restart (services)"
    )
    b.add_argument("--minutes", type=float, default=30.0)
    b.add_argument("--gpus", type=int, default=10_000)
    b.add_argument("--interval", type=float, default=10.0)
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--faults", default="all=1", help="the cluster's faults (a generator spec)")
    b.add_argument("--no-predict", action="store_true", help="run the root-cause daemon without the predictor")
    b.add_argument("--broker-down-s", type=float, default=10.0)
    b.add_argument("--sample-s", type=float, default=5.0, help="seconds between RSS and lag samples")
    b.add_argument("--drain-timeout-s", type=float, default=600.0)
    b.add_argument("--work", default="/tmp", help="where logs, state and the offline reference go")
    b.add_argument("--out", default="docs/bench", help="where soak.json and soak.svg go")


def _add_backlog(bench: Any) -> None:
    b = bench.add_parser(
        "backlog",
        help="the daemons started behind a 6-hour backlog of 4,096 GPUs: equal to offline? memory? (services)",
    )
    b.add_argument("--gpus", type=int, default=4096)
    b.add_argument("--hours", type=float, default=6.0)
    b.add_argument("--interval", type=float, default=30.0)
    b.add_argument("--seed", type=int, default=717)
    b.add_argument("--faults", default="all=2", help="the cluster's faults (a generator spec)")
    b.add_argument("--speed", type=float, default=30.0, help="how fast the steady-state hour is paced")
    b.add_argument("--kill-after-s", type=float, default=5.0, help="SIGKILL this long after the first incident")
    b.add_argument("--checkpoint-every-s", type=float, default=10.0)
    b.add_argument("--work", default="/tmp", help="where the recording, logs and state go")
    b.add_argument("--keep", action="store_true", help="keep the recording")
    b.add_argument("--out", default="docs/bench", help="where backlog.json goes")


def _add_scale(bench: Any) -> None:
    b = bench.add_parser(
        "scale", help="split detection at 10,000 and 100,000 GPUs through Kafka, 1 and 2 members (services)"
    )
    b.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="cluster sizes in GPUs")
    b.add_argument("--members", type=int, nargs="+", default=[1, 2], help="detection members per run")
    b.add_argument("--ticks", type=int, default=12, help="cluster time, in scrapes")
    b.add_argument("--interval", type=float, default=10.0)
    b.add_argument("--seed", type=int, default=3)
    b.add_argument("--partitions", type=int, default=6)
    b.add_argument("--faults", default="all=1", help="the cluster's faults (a generator spec)")
    b.add_argument("--no-predict", dest="predict", action="store_false", help="the members without the predictor")
    b.add_argument("--idle-stop-s", type=float, default=20.0, help="a member stops after this long with no input")
    b.add_argument(
        "--consume",
        type=int,
        nargs="*",
        default=[500, 5000],
        help="batch sizes for the kafka-python/confluent-kafka read",
    )
    b.add_argument("--work", default="/tmp", help="where the recordings, logs and state go")
    b.add_argument("--keep", action="store_true", help="keep the recordings")
    b.add_argument(
        "--lateness",
        type=float,
        default=5.0,
        help="how long the members hold a tick for late rows (AIOPS_TICK_LATENESS_S; a tick's delay is at least this)",
    )
    b.add_argument(
        "--live",
        action="store_true",
        help="publish the cluster as it happens (gen --kafka --speed 1), not as a backlog: lag and tick delay",
    )
    b.add_argument(
        "--staged",
        action="store_true",
        help="live, from a recording staged to a topic first and replayed at the cluster's pace (aiops replay): "
        "the generator's and the encoder's CPU stay out of the measurement; no offline references (a 30-minute "
        "100,000-GPU recording is ~40 GB as a folder)",
    )
    b.add_argument("--out", default="docs/bench", help="where scale.json (and, live, scale-lag.svg) go")


def _add_dashboards(bench: Any) -> None:
    b = bench.add_parser(
        "dashboards", help="each dashboard panel's query on a GPU history in InfluxDB: rows and time per query"
    )
    b.add_argument("--influx", metavar="URL", default="http://127.0.0.1:8086")
    b.add_argument("--gpus", type=int, default=10_000, help="cluster size of the history")
    b.add_argument("--hours", type=float, default=1.0, help="history written, ending now")
    b.add_argument("--interval", type=float, default=10.0, help="scrape interval, seconds")
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--faults", metavar="SPEC", help="fault schedule (aiops gen syntax; default: the published rate)")
    b.add_argument("--keep", action="store_true", help="keep the database afterwards (default: dropped)")
    b.add_argument("--out", help="also write the times as JSON here")


def _add_hostile_poll(bench: Any) -> None:
    b = bench.add_parser("hostile-poll", help="a poll with strings never closed: time, values kept, dead letters")
    b.add_argument("--messages", type=int, nargs="+", default=[10, 20, 40, 80], help="poll sizes, in messages")
    b.add_argument("--repeat", type=int, default=3, help="runs per size (best is reported)")


def cmd_bench(args: argparse.Namespace) -> int:
    """A bench that cannot run (no service where it was pointed, a stage that failed in a child
    process) says so in one line, exit 1, with the child's own last word when it left a log."""
    from benchmarks.run import run_bench

    try:
        return run_bench(args)
    except OSError as exc:  # requests' ConnectionError is one: nothing listens at the URL
        where = getattr(args, "influx", None)
        refused = isinstance(exc, ConnectionError) or type(exc).__name__ == "ConnectionError"
        if refused and where:
            said = f"no InfluxDB answers at {where} (--influx); scripts/services up starts one"
        else:
            said = (str(exc).splitlines() or [type(exc).__name__])[0]
        print(f"aiops bench {args.bench}: {said}", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        print(f"aiops bench {args.bench}: {exc}{_last_word(str(exc))}", file=sys.stderr)
        return 1


def _last_word(message: str) -> str:
    """`: <the last line of the log>` when `message` says `see FILE.log` and that line is aiops's
    own one-line refusal (`aiops: ...`); else nothing."""
    import re

    found = re.search(r"see (\S+\.log)\b", message)
    if found is None:
        return ""
    try:
        lines = [line for line in Path(found.group(1)).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return f": {lines[-1].removeprefix('aiops: ')}" if lines and lines[-1].startswith("aiops: ") else ""
