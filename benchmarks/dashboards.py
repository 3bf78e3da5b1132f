"""`aiops bench dashboards`: every dashboard panel's query on a history of `--gpus` GPUs in
InfluxDB, at the variables' defaults, with the rows it returns and the time it takes.

A cluster is generated with a history that ends now (`aiops gen --start`), its telemetry written
into a fresh database as the ingest service writes it (raw lines, InfluxWriter's batches), and
`aiops run --influx` run over it (incidents, anomalies, predictions, jobs and node states). Then
each dashboard's variables are resolved as Grafana resolves them on first load (a query variable
with "All" at its allValue, one without at the first value its query finds, others at their saved
value) and each panel query (and annotation query) is sent once to /query, with $timeFilter over
the dashboard's default range (or the panel's own `timeFrom`) ending now and $__interval as
Grafana derives it from the range (range / 1,000 points, never under the scrape interval).

Sized for 10,000 GPUs by default; writing that history takes a while and the machine's memory:
`--gpus 64 --hours 0.5` shows it working.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import requests
from rich.console import Console
from rich.table import Table

from aiops.dashboards_inventory import panels
from aiops.dashboards_push import DASHBOARDS
from ingest.influx_writer import InfluxWriter
from vocab.settings import InfluxSettings

MAX_DATA_POINTS = 1_000  # about what a panel as wide as the screen asks Grafana for
VARIABLE = re.compile(r"\$\{(?P<braced>\w+)(?::\w+)?\}|\[\[(?P<old>\w+)\]\]|\$(?P<plain>\w+)")
REGEX_LITERAL = re.compile(r"(?P<op>[=!]~\s*)/(?P<body>(?:[^/\\]|\\.)*)/")
REGEX_SPECIAL = re.compile(r"([\\^$*+?.()|\[\]{}/])")
DURATION = re.compile(r"^now-(\d+)([smhdw])$|^(\d+)([smhdw])$")
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
LOAD_CHUNK_LINES = 200_000


@dataclass(frozen=True)
class QueryTime:
    dashboard: str
    panel: str
    ref: str
    series: int
    rows: int
    seconds: float
    error: str = ""


def _seconds(span: str) -> float:
    m = DURATION.match(span.strip())
    if m is None:
        raise ValueError(f"a time span this benchmark does not read: {span!r}")
    number, unit = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    return float(number) * UNIT_S[unit]


def _influxql(settings: InfluxSettings, query: str) -> dict[str, Any]:
    user, _, password = settings.token.get_secret_value().partition(":")
    answer = requests.post(
        f"{settings.url}/query",
        params={"q": query, "db": settings.database, "epoch": "ns", "u": user, "p": password},
        timeout=settings.timeout_s * 10,
    )
    answer.raise_for_status()
    body: dict[str, Any] = answer.json()
    return body


def _series(body: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for result in body.get("results", []):
        if "error" in result:
            raise RuntimeError(str(result["error"]))
        out += result.get("series", [])
    return out


def render(query: str, values: dict[str, list[str]], macros: dict[str, str]) -> str:
    """The query as Grafana sends it: macros and variables substituted, values regex-escaped
    inside regex literals (several as an alternation)."""

    def substitute(text: str, regex: bool) -> str:
        def value(match: re.Match[str]) -> str:
            name = match.group("braced") or match.group("old") or match.group("plain")
            if name in macros:
                return macros[name]
            given = values.get(name, [""])
            if not regex:
                return given[0]
            escaped = [v if v == ".*" else REGEX_SPECIAL.sub(r"\\\1", v) for v in given]
            return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"

        return VARIABLE.sub(value, text)

    out, position = [], 0
    for literal in REGEX_LITERAL.finditer(query):
        out.append(substitute(query[position : literal.start()], regex=False))
        out.append(f"{literal.group('op')}/{substitute(literal.group('body'), regex=True)}/")
        position = literal.end()
    out.append(substitute(query[position:], regex=False))
    return "".join(out)


def macros_for(range_s: float, interval_s: float, now_ns: int) -> dict[str, str]:
    start_ns = now_ns - int(range_s * 1e9)
    step = max(interval_s, round(range_s / MAX_DATA_POINTS))
    return {
        "timeFilter": f"time >= {start_ns}ns AND time <= {now_ns}ns",
        "__timeFilter": f"time >= {start_ns}ns AND time <= {now_ns}ns",
        "__interval": f"{step:g}s",
        "interval": f"{step:g}s",
        "__interval_ms": str(int(step * 1000)),
    }


def defaults(settings: InfluxSettings, board: dict[str, Any], macros: dict[str, str]) -> dict[str, list[str]]:
    """Each variable's value on first load, as Grafana picks it: "All" at its allValue, or, with no
    allValue (the hidden top-k variables), every value its query finds; without "All", the first."""
    chosen: dict[str, list[str]] = {}
    for v in board.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            if v.get("includeAll") and v.get("allValue"):
                chosen[v["name"]] = [str(v["allValue"])]
                continue
            query = v["query"]["query"] if isinstance(v.get("query"), dict) else str(v.get("query"))
            found = sorted(
                {str(r[-1]) for s in _series(_influxql(settings, render(query, chosen, macros))) for r in s["values"]}
            )
            chosen[v["name"]] = (found if v.get("includeAll") else found[:1]) or [""]
        else:
            current = (v.get("current") or {}).get("value") or v.get("query", "")
            chosen[v["name"]] = [str(current[0] if isinstance(current, list) else current)]
    return chosen


def time_queries(settings: InfluxSettings, interval_s: float, files: list[Path] | None = None) -> list[QueryTime]:
    """Every panel and annotation query of the dashboards, once, at the variables' defaults."""
    out = []
    now_ns = time.time_ns()
    for path in files or sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text(encoding="utf-8"))
        board_range = _seconds(board.get("time", {}).get("from", "now-6h"))
        values = defaults(settings, board, macros_for(board_range, interval_s, now_ns))
        # a panel's own min interval ("interval": "20s") is the floor Grafana derives its $__interval from
        asked = [
            (str(p.get("title")), str(t.get("refId")), str(t.get("query")), p.get("timeFrom"), p.get("interval"))
            for p in panels(board["panels"])
            for t in p.get("targets", [])
        ]
        asked += [
            (f"annotation {a.get('name')}", "Anno", str(a["target"].get("query")), None, None)
            for a in board.get("annotations", {}).get("list", [])
            if isinstance(a.get("target"), dict)
        ]
        for title, ref, query, time_from, min_interval in asked:
            span = _seconds(time_from) if time_from else board_range
            floor = max(interval_s, _seconds(min_interval)) if min_interval else interval_s
            text = render(query, values, macros_for(span, floor, now_ns))
            started = time.perf_counter()
            try:
                series = _series(_influxql(settings, text))
                error = ""
            except (RuntimeError, requests.RequestException) as exc:
                series, error = [], str(exc)[:200]
            seconds = time.perf_counter() - started
            rows = sum(len(s.get("values", [])) for s in series)
            out.append(QueryTime(path.stem, title, ref, len(series), rows, seconds, error))
    return out


def load(settings: InfluxSettings, telemetry: Path) -> tuple[int, float]:
    """The telemetry's lines into the database as the ingest service writes them; (lines, seconds)."""
    writer = InfluxWriter(settings)
    lines = 0
    started = time.perf_counter()
    with telemetry.open("rb") as f:
        chunk: list[bytes] = []
        for line in f:
            if line.strip():
                chunk.append(line.rstrip(b"\n"))
            if len(chunk) >= LOAD_CHUNK_LINES:
                writer.write_lines(chunk)
                writer.flush()
                lines += len(chunk)
                chunk = []
        writer.write_lines(chunk)
        writer.flush()
        lines += len(chunk)
    return lines, time.perf_counter() - started


def _aiops(*argv: str) -> None:
    """An aiops command in a child process (`python -m aiops.cli`): the CLI imports the benches, so
    a bench that imported the CLI back would close a cycle (tests/unit/test_layers.py)."""
    done = subprocess.run([sys.executable, "-m", "aiops.cli", *argv], check=False)
    if done.returncode != 0:
        raise RuntimeError(f"aiops {argv[0]} failed ({done.returncode})")


def bench_dashboards(args: argparse.Namespace, console: Console) -> list[QueryTime]:
    settings = InfluxSettings(url=args.influx, database=f"bench_dashboards_{uuid.uuid4().hex[:8]}")
    _series(_influxql(settings.model_copy(update={"database": ""}), f'CREATE DATABASE "{settings.database}"'))
    try:
        with tempfile.TemporaryDirectory(prefix="bench-dashboards-") as tmp:
            folder, run = Path(tmp) / "cluster", Path(tmp) / "run"
            start = int(time.time() // args.interval * args.interval - args.hours * 3600)
            gen = ["gen", "--gpus", str(args.gpus), "--hours", str(args.hours), "--interval", str(args.interval)]
            gen += ["--seed", str(args.seed), "--start", str(start), "--out", str(folder)]
            _aiops(*gen, *(["--faults", args.faults] if args.faults else []))
            lines, load_s = load(settings, folder / "telemetry.lp")
            console.print(f"{lines:,} lines of {args.gpus:,} GPUs over {args.hours:g} h written in {load_s:.1f} s")
            to_influx = ["--influx", settings.url, "--database", settings.database]
            _aiops("run", "--input", str(folder), "--out", str(run), "--interval", str(args.interval), *to_influx)
        times = time_queries(settings, args.interval)
    finally:
        if not args.keep:
            _influxql(settings.model_copy(update={"database": ""}), f'DROP DATABASE "{settings.database}"')
    table = Table(title=f"aiops bench dashboards: {args.gpus:,} GPUs, {args.hours:g} h, variables at their defaults")
    for column, justify in (("dashboard", "left"), ("panel", "left"), ("ref", "left"), ("series", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    table.add_column("rows", justify="right")
    table.add_column("ms", justify="right")
    table.add_column("error")
    for t in times:
        table.add_row(t.dashboard, t.panel, t.ref, f"{t.series:,}", f"{t.rows:,}", f"{t.seconds * 1000:.0f}", t.error)
    console.print(table)
    slowest = max(times, key=lambda t: t.seconds)
    console.print(
        f"{len(times)} queries in {sum(t.seconds for t in times):.2f} s; slowest {slowest.dashboard} / "
        f"{slowest.panel} [{slowest.ref}] {slowest.seconds * 1000:.0f} ms; {sum(1 for t in times if t.error)} errors"
    )
    if args.out:
        Path(args.out).write_text(json.dumps([asdict(t) for t in times], indent=1) + "\n")
    return times


__all__ = ["QueryTime", "bench_dashboards", "defaults", "load", "macros_for", "render", "time_queries"]
