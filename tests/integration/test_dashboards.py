"""Every Grafana panel and template variable query, run against the real InfluxDB with real data.

Grafana cannot run here, so this does what Grafana would: write the sample telemetry
(tests/data/sample.lp, its good lines) and some aiops_ingest counters into a fresh database,
resolve each dashboard's template variables by running their queries in order, substitute the
macros ($timeFilter, $__interval, ...) and the variables into every panel's InfluxQL, run it, and
require that it answers without error and with at least one series holding a value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests

from ingest.pipeline import IngestStats
from ingest.service import STATS_MEASUREMENT, stats_line
from rca.influx import ANOMALY_MEASUREMENT, NOTICE_MEASUREMENT, PREDICTION_MEASUREMENT
from rca.influx import MEASUREMENT as INCIDENT_MEASUREMENT
from vocab.catalog import MEASUREMENTS
from vocab.settings import InfluxSettings

if TYPE_CHECKING:
    from tests.conftest import SAMPLE_LP, influxql
else:
    try:
        from tests.conftest import SAMPLE_LP, influxql
    except ModuleNotFoundError:  # tests/ is not a package: pytest put tests/ itself on sys.path
        from conftest import SAMPLE_LP, influxql

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_FILES = sorted((ROOT / "dashboards" / "json").glob("*.json"))

# tests/data/sample.lp: 30 ticks at 10 s from 2026-01-01T00:00:00Z, then deliberately bad lines.
START_NS = 1_767_225_600 * 10**9
TICK_NS = 10 * 10**9
TICKS = 30
END_NS = START_NS + (TICKS - 1) * TICK_NS
BAD_LINES_MARKER = "# the lines below"

INGEST_INSTANCES = ("ingest-0", "ingest-1")

# What Grafana puts in place of its global macros for a range covering the sample.
MACROS: dict[str, str] = {
    "timeFilter": f"time >= {START_NS}ns AND time <= {END_NS}ns",
    "__timeFilter": f"time >= {START_NS}ns AND time <= {END_NS}ns",
    "__interval": "10s",
    "interval": "10s",
    "__interval_ms": "10000",
    "__from": str(START_NS // 10**6),
    "__to": str(END_NS // 10**6),
    "__range": f"{(END_NS - START_NS) // 10**9}s",
    "__range_s": str((END_NS - START_NS) // 10**9),
    "__range_ms": str((END_NS - START_NS) // 10**6),
}

# $name, ${name}, ${name:format}, [[name]]
VARIABLE = re.compile(r"\$\{(?P<braced>\w+)(?::\w+)?\}|\[\[(?P<old>\w+)\]\]|\$(?P<plain>\w+)")
# An InfluxQL regex literal after =~ or !~, where Grafana regex-escapes the values it substitutes.
REGEX_LITERAL = re.compile(r"(?P<op>[=!]~\s*)/(?P<body>(?:[^/\\]|\\.)*)/")
REGEX_SPECIAL = re.compile(r"([\\^$*+?.()|\[\]{}/])")


# ---------------------------------------------------------------- data


def good_sample_lines() -> list[str]:
    """The lines of sample.lp before its deliberately bad tail, without comments and blanks."""
    lines: list[str] = []
    for line in SAMPLE_LP.read_text(encoding="utf-8").splitlines():
        if line.startswith(BAD_LINES_MARKER):
            break
        if line.strip() and not line.startswith("#"):
            lines.append(line)
    return lines


def ingest_counter_lines() -> list[str]:
    """aiops_ingest exactly as the ingest service writes it (its own stats_line): cumulative counters
    per instance. The second instance restarts halfway, so its counters start again from zero."""
    lines: list[str] = []
    for n, instance in enumerate(INGEST_INSTANCES):
        for tick in range(TICKS):
            flushes = tick + 1 if n == 0 or tick < TICKS // 2 else tick + 1 - TICKS // 2
            stats = IngestStats(
                lines=2_000 * flushes,
                values=40_000 * flushes,
                rejected=3 * flushes,
                deadlettered=3 * flushes,
                sentinels_masked=5 * flushes,
                written=1_997 * flushes,
                retried=flushes // 10,
                dropped=0,
            )
            lines.append(stats_line(stats, instance, START_NS + tick * TICK_NS).decode())
    return lines


def incident_lines() -> list[str]:
    """aiops_incident as `aiops run --influx` writes it: the real engine on a leaf going down, a
    PSU failing and a prediction, within the sample's time range."""
    from detectors.anomaly import Anomaly, Prediction
    from rca.graph import TopologyGraph
    from rca.incidents import IncidentEngine
    from rca.influx import incident_line
    from telemetry_gen.topology import build_fat_tree

    engine = IncidentEngine(TopologyGraph.from_json(build_fat_tree(256).to_json()))
    t0 = START_NS / 1e9
    leaf = [Anomaly(t0, f"n{n:05d}-nic3", "link_downed", "rule:error_counter", 1.0, 1.0, 0.0, "nic") for n in range(32)]
    psu = [Anomaly(t0 + 100, "n00007-psu1", "status", "rule:state", 1.0, 0.0, None, "psu")]
    warning = Prediction("n00020-gpu2", t0 + 20, "gpu_hbm_ecc", 0.8, 6 * 3600.0, 7200.0, "drain")
    states = []
    for tick in range(TICKS):
        t = t0 + tick * TICK_NS / 1e9
        anomalies = (leaf if tick in (0, 5) else []) + (psu if tick == 10 else [])
        predictions = [warning] if tick == 2 else []
        states += [json.loads(i.to_json()) for i in engine.process(t, anomalies, predictions)]
    assert {s["status"] for s in states} == {"open", "warning"}
    return [incident_line(s) for s in states]


def notice_lines() -> list[str]:
    """aiops_notice as `aiops run --influx` writes it: coverage judged by the real watch on GPU
    rows that carry only a stock exporter's temperature and XID fields."""
    from detectors.coverage import CoverageWatch
    from ingest.pipeline import IngestCore
    from rca.influx import notice_line

    watch, core = CoverageWatch(settle_ticks=1), IngestCore()
    t0 = START_NS // 10**9
    rows = [f"gpu,node=n1,gpu=n1-gpu{i} DCGM_FI_DEV_GPU_TEMP=60,DCGM_FI_DEV_XID_ERRORS=0i {START_NS}" for i in range(8)]
    watch.observe(core.process(("\n".join(rows) + "\n").encode()).frames)
    notices = watch.notices(float(t0))
    assert {n.status for n in notices} == {"blind", "degraded"}
    return [notice_line(n) for n in notices]


def finding_lines() -> list[str]:
    """aiops_anomaly and aiops_prediction as `aiops run --influx` writes them, tagged by the real
    topology (node, rack, pod, plane): anomalies of a leaf's NICs and a PSU, an early warning, and
    predictions of an HBM failure and a cooling loop."""
    from aiops.runner import entity_tags
    from detectors.anomaly import Anomaly, Prediction
    from rca.graph import TopologyGraph
    from rca.influx import anomaly_line, prediction_line
    from telemetry_gen.topology import build_fat_tree

    where = entity_tags(TopologyGraph.from_json(build_fat_tree(256).to_json()))
    t0 = START_NS / 1e9
    lines = []
    for tick in range(TICKS):
        t = t0 + tick * TICK_NS / 1e9
        found = [
            Anomaly(t, f"n{n:05d}-nic3", "link_downed", "rule:error_counter", 1.0, 1.0, 0.0, "nic") for n in range(4)
        ]
        found.append(Anomaly(t, "n00007-gpu2", "DCGM_FI_DEV_GPU_TEMP", "warn:job", 3.2, 84.0, 71.0, "gpu"))
        lines += [anomaly_line(a, where(a.entity)) for a in found]
        if tick % 10 == 0:
            for p in (
                Prediction("n00002-gpu2", t, "gpu_hbm_ecc", 0.8, 6 * 3600.0, 7200.0, "drain at the next checkpoint"),
                Prediction("rack0001-cdu", t, "rack_cooling", 0.6, 6 * 3600.0, None, "check the loop"),
            ):
                lines.append(prediction_line(p, where(p.entity)))
    assert all(",rack=" in line for line in lines)
    return lines


def write_lines(settings: InfluxSettings, lines: list[str]) -> None:
    response = requests.post(
        f"{settings.url}/write",
        params={"db": settings.database, "precision": "ns"},
        data="\n".join(lines).encode("utf-8"),
        timeout=60,
    )
    assert response.status_code == 204, f"InfluxDB refused the write: {response.status_code} {response.text}"


@pytest.fixture
def telemetry_db(influx_settings: InfluxSettings) -> InfluxSettings:
    """A fresh database holding the sample telemetry and the ingest counters."""
    write_lines(influx_settings, good_sample_lines())
    write_lines(influx_settings, ingest_counter_lines())
    write_lines(influx_settings, incident_lines())
    write_lines(influx_settings, notice_lines())
    write_lines(influx_settings, finding_lines())
    return influx_settings


# ---------------------------------------------------------------- Grafana's side


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in (collapsed) rows."""
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", []))


def variable_query(variable: dict[str, Any]) -> str:
    query = variable.get("query")
    if isinstance(query, dict):
        query = query.get("query")
    assert isinstance(query, str), f"variable {variable['name']!r} has no query"
    return query


def render(query: str, variables: dict[str, str]) -> str:
    """The query as Grafana would send it: macros and variables substituted, values regex-escaped
    inside regex literals (=~ /^$node$/) and verbatim elsewhere."""

    def substitute(text: str, regex: bool) -> str:
        def value(match: re.Match[str]) -> str:
            name = match.group("braced") or match.group("old") or match.group("plain")
            if name in MACROS:
                return MACROS[name]
            if name not in variables:
                raise AssertionError(
                    f"no value for ${name} (not a template variable, or its query failed) in {query!r}"
                )
            return REGEX_SPECIAL.sub(r"\\\1", variables[name]) if regex else variables[name]

        return VARIABLE.sub(value, text)

    out: list[str] = []
    position = 0
    for literal in REGEX_LITERAL.finditer(query):
        out.append(substitute(query[position : literal.start()], regex=False))
        out.append(f"{literal.group('op')}/{substitute(literal.group('body'), regex=True)}/")
        position = literal.end()
    out.append(substitute(query[position:], regex=False))
    return "".join(out)


def series_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for result in body.get("results", []):
        out.extend(result.get("series", []))
    return out


def has_value(series: list[dict[str, Any]]) -> bool:
    """Some row holds a non-null value besides its time."""
    for s in series:
        columns = s.get("columns", [])
        for row in s.get("values", []):
            if any(v is not None for c, v in zip(columns, row, strict=True) if c != "time"):
                return True
    return False


def resolve_variables(settings: InfluxSettings, dashboard: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """Run the template variables' queries in order, as Grafana does, and pick each one's first value."""
    values: dict[str, str] = {}
    failures: list[str] = []
    for variable in dashboard.get("templating", {}).get("list", []):
        name, kind = variable["name"], variable.get("type")
        if kind == "query":
            query = variable_query(variable)
            try:
                rendered = render(query, values)
                body = influxql(settings, rendered, settings.database)
            except AssertionError as error:
                failures.append(f"variable ${name}: {query}\n    {error}")
                continue
            found = sorted(str(row[-1]) for s in series_of(body) for row in s.get("values", []))
            if not found:
                failures.append(f"variable ${name}: {rendered}\n    returned no values")
                continue
            values[name] = found[0]
        elif kind in ("custom", "constant", "textbox", "interval"):
            current = variable.get("current", {}).get("value") or variable.get("query", "")
            values[name] = str(current[0] if isinstance(current, list) else current).split(",")[0]
        else:
            failures.append(f"variable ${name}: type {kind!r} is not handled by this test")
    return values, failures


# ---------------------------------------------------------------- tests


def test_sample_data_is_in_influxdb(telemetry_db: InfluxSettings) -> None:
    body = influxql(telemetry_db, "SHOW MEASUREMENTS", telemetry_db.database)
    measurements = {row[0] for s in series_of(body) for row in s["values"]}
    assert measurements == {m.name for m in MEASUREMENTS} | {
        STATS_MEASUREMENT,
        INCIDENT_MEASUREMENT,
        NOTICE_MEASUREMENT,
        ANOMALY_MEASUREMENT,
        PREDICTION_MEASUREMENT,
    }
    body = influxql(telemetry_db, 'SELECT count("DCGM_FI_DEV_GPU_TEMP") FROM "gpu"', telemetry_db.database)
    assert series_of(body)[0]["values"][0][1] == 16 * TICKS
    body = influxql(
        telemetry_db, 'SELECT count("lines") FROM "aiops_ingest" GROUP BY "instance"', telemetry_db.database
    )
    assert [s["values"][0][1] for s in series_of(body)] == [TICKS] * len(INGEST_INSTANCES)


def test_render_substitutes_like_grafana() -> None:
    rendered = render(
        'SELECT max("x") FROM "gpu" WHERE "node" =~ /^$node$/ AND "job" = \'${job}\' AND $timeFilter '
        "GROUP BY time($__interval), [[rack]] fill(none)",
        {"node": "n0001.a", "job": "job-1", "rack": "r0"},
    )
    assert rendered == (
        f'SELECT max("x") FROM "gpu" WHERE "node" =~ /^n0001\\.a$/ AND "job" = \'job-1\' AND '
        f"time >= {START_NS}ns AND time <= {END_NS}ns GROUP BY time(10s), r0 fill(none)"
    )
    with pytest.raises(AssertionError, match="no value for"):
        render('SELECT * FROM "gpu" WHERE "node" = \'$nod\'', {"node": "n0001"})


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=[p.name for p in DASHBOARD_FILES])
def test_every_panel_query_returns_data(telemetry_db: InfluxSettings, path: Path) -> None:
    dashboard = json.loads(path.read_text(encoding="utf-8"))
    values, failures = resolve_variables(telemetry_db, dashboard)
    checked = 0
    # annotations (incidents drawn on the telemetry) are queries as much as the panels' targets
    annotations = [
        {"title": f"annotation {a.get('name')}", "targets": [a["target"]]}
        for a in dashboard.get("annotations", {}).get("list", [])
        if isinstance(a.get("target"), dict)
    ]
    for panel in [*panels(dashboard["panels"]), *annotations]:
        for target in panel.get("targets", []):
            title = f"{panel.get('title')!r} [{target.get('refId')}]"
            query = target.get("query")
            if not target.get("rawQuery") or not isinstance(query, str):
                failures.append(f"{title}: not a raw InfluxQL query, which this test cannot check")
                continue
            checked += 1
            try:
                rendered = render(query, values)
                body = influxql(telemetry_db, rendered, telemetry_db.database)
            except AssertionError as error:
                failures.append(f"{title}: {query}\n    {error}")
                continue
            series = series_of(body)
            if not series:
                failures.append(f"{title}: {rendered}\n    returned no series")
            elif not has_value(series):
                failures.append(f"{title}: {rendered}\n    returned only null values")
    assert checked, f"{path.name} has no panel queries"
    assert not failures, f"{path.name} (variables {values}):\n" + "\n".join(failures)
