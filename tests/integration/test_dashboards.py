"""Every Grafana panel, template variable and annotation query, run against the real InfluxDB on
what a real pipeline run wrote.

Grafana cannot run here, so this does what Grafana would. A cluster is generated (256 GPUs,
three hours at 10 s, faults of six kinds, the typical fleet's noise, a history that ends now)
with two nodes on the stock dcgm-exporter counters (as a site mid-rollout runs them) and one
NVLink counter nowhere; its telemetry goes through real Kafka into the real ingest service (raw
lines into InfluxDB) and the real daemon (`aiops run --kafka --influx --actions
config/actions.yml`: anomalies, predictions, incidents, notices, jobs, its own health, and the
plans of a dry run). Then each dashboard's variables are resolved by running their queries in
order, the macros ($timeFilter, $__interval, ...) and variables are substituted as Grafana
substitutes them (values regex-escaped inside regex literals, several values as an alternation),
and every query must answer without error and with at least one series holding a value: an
unknown measurement or field is no error in InfluxQL, only an empty answer.

Each query runs three ways: every variable at its default ("All", or for a variable that picks
nodes, GPUs, jobs, switches or racks of the telemetry the first value its query finds, as Grafana
picks it: tests/unit/test_dashboards_variables.py; a hidden top-k variable holds every value its
query ranks, ranked again when a variable it names is set), every variable at one value (a query must
answer for each value tried, and with data for at least one of them: a value with no data, such
as a node without ECC fields, is no fault of the query), and at several values (that one and
another: the alternation must keep what the single value found).

A panel with its own relative time (the fleet's "last 5 minutes", `timeFrom`) is queried over
that last span of the generated history. The scheduler's events get two node states at the end
of the history (a drain and a node down, as a Slurm source reports them) for the fleet
dashboard's node panels.
"""

from __future__ import annotations

import itertools
import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from aiops.cli import main
from vocab.settings import InfluxSettings, Settings

if TYPE_CHECKING:
    from tests.collectors.dcgm_exporter import read_counters
    from tests.conftest import influxql
else:
    try:
        from tests.collectors.dcgm_exporter import read_counters
        from tests.conftest import influxql
    except ModuleNotFoundError:  # tests/ is not a package: pytest put tests/ itself on sys.path
        from collectors.dcgm_exporter import read_counters
        from conftest import influxql

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_FILES = sorted((ROOT / "dashboards" / "json").glob("*.json"))
STOCK_COUNTERS = ROOT / "tests" / "data" / "dcgm-exporter" / "default-counters.csv"

INTERVAL_S = 10
HOURS = 3
FAULTS = "leaf_down=1,psu_failure=1,pfc_storm=1,optic_degradation=2,gpu_hbm_ecc=2,rack_cooling=1"
STOCK_NODES = ("n00000", "n00001")
# not in the stock counters file, nor in this site's: NVLink faults are judged on part of their
# evidence, and the coverage table says so
NEVER_SENT = "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"
NODE_STATES = {"n00030": "drain", "n00031": "down"}  # said by the scheduler at the end of the history
ALL = ".*"  # the dashboards' allValue
HIDDEN = 2  # a variable's `hide`: not shown on the dashboard
TRIES = 12  # single values tried per variable before a query is said to find nothing
# ... or, for a query of one variable, up to this many: a panel whose data is on few entities (a
# prediction on 3 of 32 nodes) shows it for those, which need not be the first twelve in the list
TRIES_ONE = 64

# $name, ${name}, ${name:format}, [[name]]
VARIABLE = re.compile(r"\$\{(?P<braced>\w+)(?::\w+)?\}|\[\[(?P<old>\w+)\]\]|\$(?P<plain>\w+)")
# An InfluxQL regex literal after =~ or !~, where Grafana regex-escapes the values it substitutes.
REGEX_LITERAL = re.compile(r"(?P<op>[=!]~\s*)/(?P<body>(?:[^/\\]|\\.)*)/")
REGEX_SPECIAL = re.compile(r"([\\^$*+?.()|\[\]{}/])")

Values = dict[str, list[str]]
TOPICS: tuple[str, ...] = ("telemetry_topic", "anomalies_topic", "predictions_topic", "incidents_topic")
TOPICS += ("notices_topic", "deadletter_topic", "events_topic")


# ---------------------------------------------------------------- the run


def as_collected(telemetry: Path, stock_nodes: tuple[str, ...], never_sent: str) -> None:
    """The GPU lines as this site's exporters send them: on `stock_nodes` only the fields of the
    stock counters file, and nowhere the field `never_sent` (a counters file without it)."""
    stock = {c.field for c in read_counters(STOCK_COUNTERS) if c.kind != "label"}
    marks = tuple(f",node={n} " for n in stock_nodes) + tuple(f",node={n}," for n in stock_nodes)
    out = []
    for line in telemetry.read_text().splitlines():
        if line.startswith("gpu,"):
            head, fields, stamp = line.split(" ")
            on_stock = any(m in line for m in marks)
            kept = [
                f for f in fields.split(",") if (k := f.split("=", 1)[0]) != never_sent and (not on_stock or k in stock)
            ]
            out.append(f"{head} {','.join(kept)} {stamp}")
        else:
            out.append(line)
    telemetry.write_text("\n".join(out) + "\n")


def cut_after(folder: Path, end: int) -> None:
    """The history as collected until `end` (epoch seconds): later telemetry lines, schedule
    events and faults are not there yet."""
    telemetry = folder / "telemetry.lp"
    lines = telemetry.read_text().splitlines()
    telemetry.write_text("\n".join(ln for ln in lines if ln and int(ln.rsplit(" ", 1)[1]) < end * 10**9) + "\n")
    for name, key in (("events.jsonl", "time"), ("truth.jsonl", "onset")):
        path = folder / name
        rows = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows if float(r[key]) < end))


@pytest.fixture(scope="module")
def run_db(
    services: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[InfluxSettings, dict[str, str]]]:
    """A fresh database holding what the ingest service and the daemon wrote on a generated run,
    and the macros for its time range."""
    suffix = uuid.uuid4().hex[:10]
    topics = {name: f"test.{name.removesuffix('_topic')}.{suffix}" for name in TOPICS}
    kafka = services.kafka
    influx = services.influx.model_copy(update={"database": f"test_{suffix}"})
    influxql(influx, f'CREATE DATABASE "{influx.database}"')
    folder = tmp_path_factory.mktemp("cluster")
    start = int(time.time()) // INTERVAL_S * INTERVAL_S - HOURS * 3600  # a history that ends now
    # an hour more is generated and cut off: failures still to come at the end of the range, so a
    # warning the predictor raised for one stands there, as on a live cluster (every fault of a
    # generated history has its onset inside it: without the cut, a warning left standing at the
    # end could only be a false one)
    gen = ["gen", "--gpus", "256", "--hours", str(HOURS + 1), "--interval", str(INTERVAL_S), "--seed", "2704"]
    assert main([*gen, "--start", str(start), "--faults", FAULTS, "--out", str(folder)]) == 0
    cut_after(folder, start + HOURS * 3600)
    as_collected(folder / "telemetry.lp", STOCK_NODES, NEVER_SENT)
    with (folder / "events.jsonl").open("a") as events:  # late: the faults' incidents stand as they were
        for node, state in NODE_STATES.items():
            said = {"type": "node_state", "nodes": [node], "state": state, "reason": f"test: {state}"}
            events.write(json.dumps({**said, "time": start + HOURS * 3600 - 60}) + "\n")
    common = ["--kafka", kafka.bootstrap, "--topic", topics["telemetry_topic"]]
    assert main(["produce", str(folder / "telemetry.lp"), *common, "--partitions", "3"]) == 0
    to_influx = ["--influx", influx.url, "--database", influx.database]
    with pytest.MonkeyPatch.context() as env:
        for name, topic in topics.items():
            env.setenv(f"AIOPS_KAFKA__{name.upper()}", topic)
        env.setenv("AIOPS_KAFKA__POLL_TIMEOUT_MS", "200")
        assert main(["ingest", *common, "--group", f"test-ingest-{suffix}", *to_influx, "--stop-when-idle", "5"]) == 0
        daemon = ["run", *common, "--topology", str(folder / "topology.json"), "--interval", str(INTERVAL_S)]
        daemon += ["--events", str(folder / "events.jsonl"), "--group", f"test-run-{suffix}", "--stop-when-idle", "8"]
        # acting on it as the shipped policy file says: a dry run, every plan audited
        actions = ["--actions", str(ROOT / "config" / "actions.yml")]
        assert main([*daemon, *to_influx, *actions]) == 0
    end_ns = (time.time_ns() // 10**9 + 1) * 10**9  # the wall-clock points (health, ingest) end now
    start_ns = start * 10**9
    macros = {
        "timeFilter": f"time >= {start_ns}ns AND time <= {end_ns}ns",
        "__timeFilter": f"time >= {start_ns}ns AND time <= {end_ns}ns",
        # Grafana: range / max data points (~1,000), rounded, never below the source's 10 s
        "__interval": "10s",
        "interval": "10s",
        "__interval_ms": "10000",
        "__from": str(start_ns // 10**6),
        "__to": str(end_ns // 10**6),
        "__range": f"{(end_ns - start_ns) // 10**9}s",
        "__range_s": str((end_ns - start_ns) // 10**9),
        "__range_ms": str((end_ns - start_ns) // 10**6),
    }
    yield influx, macros
    influxql(influx, f'DROP DATABASE "{influx.database}"')


# ---------------------------------------------------------------- Grafana's side


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in (collapsed) rows."""
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", []))


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], str | None]]:
    """(title, target, the panel's own relative time) of every panel target and annotation query."""
    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            yield f"{panel.get('title')!r} [{target.get('refId')}]", target, panel.get("timeFrom")
    for annotation in dashboard.get("annotations", {}).get("list", []):
        if isinstance(annotation.get("target"), dict):
            yield f"annotation {annotation.get('name')!r}", annotation["target"], None


SPAN = re.compile(r"^(\d+)([smhd])$")
SPAN_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def own_range(macros: dict[str, str], time_from: str | None) -> dict[str, str]:
    """The macros for a panel with its own relative time (`timeFrom`: "5m", "7d"), as Grafana
    applies it: the last span of the range, here ending where the generated history ends (the
    last 5 minutes of telemetry, not of the wall clock the test ran on past it)."""
    if not time_from:
        return macros
    span = SPAN.match(time_from)
    assert span is not None, f"a timeFrom this test does not read: {time_from!r}"
    start_ns = int(macros["__from"]) * 10**6
    end_ns = start_ns + HOURS * 3600 * 10**9
    since_ns = max(start_ns, end_ns - int(span[1]) * SPAN_S[span[2]] * 10**9)
    window = f"time >= {since_ns}ns AND time <= {end_ns}ns"
    return {**macros, "timeFilter": window, "__timeFilter": window}


def variable_query(variable: dict[str, Any]) -> str:
    query = variable.get("query")
    if isinstance(query, dict):
        query = query.get("query")
    assert isinstance(query, str), f"variable {variable['name']!r} has no query"
    return query


def render(query: str, variables: Values, macros: dict[str, str]) -> str:
    """The query as Grafana would send it: macros and variables substituted; inside regex literals
    (=~ /^$node$/) the values regex-escaped, several as (a|b); elsewhere verbatim, and a variable
    holding several values there is an error (Grafana's alternation would match nothing)."""

    def substitute(text: str, regex: bool) -> str:
        def value(match: re.Match[str]) -> str:
            name = match.group("braced") or match.group("old") or match.group("plain")
            if name in macros:
                return macros[name]
            if name not in variables:
                raise AssertionError(f"no value for ${name} (not a template variable, or its query failed)")
            given = variables[name]
            if not regex:
                if len(given) != 1:
                    raise AssertionError(f"${name} holds several values outside a regex literal: {query!r}")
                return given[0]
            escaped = [v if v == ALL else REGEX_SPECIAL.sub(r"\\\1", v) for v in given]
            return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"

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


def resolve_variables(
    settings: InfluxSettings, dashboard: dict[str, Any], macros: dict[str, str]
) -> tuple[Values, Values, list[str]]:
    """Run the template variables' queries in order, as Grafana does (a later one may name an
    earlier one, at its default): each variable's default ("All", or the first value its query
    found where "All" is not offered) and the values its query found."""
    at_all: Values = {}
    found: Values = {}
    failures: list[str] = []
    for variable in dashboard.get("templating", {}).get("list", []):
        name, kind = variable["name"], variable.get("type")
        if kind == "query":
            query = variable_query(variable)
            try:
                body = influxql(settings, render(query, at_all, macros), settings.database)
            except AssertionError as error:
                failures.append(f"variable ${name}: {query}\n    {error}")
                continue
            values = sorted({str(row[-1]) for s in series_of(body) for row in s.get("values", [])})
            if not values:
                failures.append(f"variable ${name}: {query}\n    returned no values")
                continue
            if top_k(variable):
                # a hidden top-k variable: its "All" is every value its query found (the k entities
                # a panel draws), as Grafana expands an "All" that has no allValue
                at_all[name] = values
            elif variable.get("includeAll"):
                assert variable.get("allValue") == ALL, f"${name}: no All of {ALL}"
                at_all[name] = [ALL]
            else:  # Grafana's choice with no saved value: the first option, sorted as `sort` 1 sorts
                assert variable.get("sort") == 1 and "current" not in variable, f"${name}: not the first value"
                at_all[name] = values[:1]
            found[name] = values
        elif kind in ("custom", "constant", "textbox", "interval"):
            current = variable.get("current", {}).get("value") or variable.get("query", "")
            at_all[name] = found[name] = [str(current[0] if isinstance(current, list) else current).split(",")[0]]
        else:
            failures.append(f"variable ${name}: type {kind!r} is not handled by this test")
    return at_all, found, failures


def top_k(variable: dict[str, Any]) -> bool:
    """A hidden variable whose "All" (no allValue) is every value its query ranks: the k entities a
    panel draws."""
    return bool(variable.get("includeAll")) and variable.get("hide") == HIDDEN and not variable.get("allValue")


def ranked(
    settings: InfluxSettings, dashboard: dict[str, Any], values: Values, macros: dict[str, str], changed: list[str]
) -> Values:
    """`values` with each top-k variable whose query names a `changed` one ranked again under them,
    as Grafana refreshes a variable when one its query names changes (the busiest ports of the
    switch picked, not of the first)."""
    out, moved = dict(values), set(changed)
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query" and top_k(variable) and moved & set(named(variable_query(variable))):
            body = influxql(settings, render(variable_query(variable), out, macros), settings.database)
            out[variable["name"]] = sorted({str(row[-1]) for s in series_of(body) for row in s.get("values", [])})
            moved.add(variable["name"])
    return out


def answer(settings: InfluxSettings, query: str, values: Values, macros: dict[str, str]) -> bool:
    """Whether the query, so rendered, returns a series with a value (an InfluxQL error fails)."""
    return has_value(series_of(influxql(settings, render(query, values, macros), settings.database)))


FILTER = re.compile(r'"(?P<tag>\w+)"\s*=~\s*/\^\$(?P<var>\w+)\$/')
FROM = re.compile(r'FROM\s+"(?P<measurement>\w+)"')


def _untagged(settings: InfluxSettings, query: str, chosen: list[str]) -> bool:
    """Whether what the query reads holds no value at all of a tag a chosen variable filters on
    (a run whose only predictions are of GPUs has none with a rail: the fabric dashboard's
    prediction annotation then shows nothing for any rail, rightly). Where the measurement holds
    values of the tag, a query that finds nothing for any of them is a broken query."""
    measurement = FROM.search(query)
    if measurement is None:
        return False
    for m in FILTER.finditer(query):
        if m["var"] in chosen:
            body = influxql(
                settings,
                f'SHOW TAG VALUES FROM "{measurement["measurement"]}" WITH KEY = "{m["tag"]}"',
                settings.database,
            )
            if not any(s.get("values") for s in series_of(body)):
                return True
    return False


def named(query: str) -> list[str]:
    return sorted({m.group("braced") or m.group("old") or m.group("plain") for m in VARIABLE.finditer(query)})


# ---------------------------------------------------------------- tests


def test_render_substitutes_like_grafana() -> None:
    macros = {"timeFilter": "time >= 0ns AND time <= 10ns", "__interval": "10s"}
    rendered = render(
        'SELECT max("x") FROM "gpu" WHERE "node" =~ /^$node$/ AND "job" = \'${job}\' AND $timeFilter '
        "GROUP BY time($__interval), [[rack]] fill(none)",
        {"node": ["n0001.a", "n2"], "job": ["job-1"], "rack": ["r0"]},
        macros,
    )
    assert rendered == (
        'SELECT max("x") FROM "gpu" WHERE "node" =~ /^(n0001\\.a|n2)$/ AND "job" = \'job-1\' AND '
        "time >= 0ns AND time <= 10ns GROUP BY time(10s), r0 fill(none)"
    )
    with pytest.raises(AssertionError, match="no value for"):
        render('SELECT * FROM "gpu" WHERE "node" = \'$nod\'', {"node": ["n0001"]}, macros)
    with pytest.raises(AssertionError, match="several values outside a regex"):
        render('SELECT * FROM "gpu" WHERE "node" = \'$node\'', {"node": ["a", "b"]}, macros)


def test_the_run_wrote_what_the_dashboards_read(run_db: tuple[InfluxSettings, dict[str, str]]) -> None:
    settings, _ = run_db
    body = influxql(settings, "SHOW MEASUREMENTS", settings.database)
    measurements = {row[0] for s in series_of(body) for row in s["values"]}
    wanted = {"gpu", "nic", "switch", "optic", "psu", "cooling", "aiops_ingest"}
    wanted |= {"aiops_incident", "aiops_anomaly", "aiops_prediction", "aiops_notice", "aiops_job", "aiops_service"}
    wanted |= {"aiops_action", "aiops_node"}
    assert wanted <= measurements
    for key, allowed in (("rail", {str(r) for r in range(8)}), ("pod", {"pod0"})):  # 256 GPUs: one pod of 8 rails
        body = influxql(settings, f'SHOW TAG VALUES FROM "aiops_anomaly" WITH KEY = "{key}"', settings.database)
        labels = {row[1] for s in series_of(body) for row in s["values"]}
        assert labels and labels <= allowed, f"{key}: {labels}"


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=[p.name for p in DASHBOARD_FILES])
def test_every_query_returns_data(run_db: tuple[InfluxSettings, dict[str, str]], path: Path) -> None:
    settings, macros = run_db
    dashboard = json.loads(path.read_text(encoding="utf-8"))
    at_all, found, failures = resolve_variables(settings, dashboard, macros)
    checked = 0
    for title, target, time_from in queries(dashboard):
        panel_macros = own_range(macros, time_from)
        query = target.get("query")
        if not target.get("rawQuery") or not isinstance(query, str):
            failures.append(f"{title}: not a raw InfluxQL query, which this test cannot check")
            continue
        checked += 1
        try:
            # a variable that defaults to its first value may find none of the query's data there
            # (a node on the stock exporter sends no ECC fields): a value that holds some is looked
            # for below, among those its query found
            narrowed = [v for v in named(query) if v in found and at_all[v] != [ALL] and found[v] != at_all[v]]
            if not answer(settings, query, at_all, panel_macros) and not narrowed:
                failures.append(
                    f"{title}: {render(query, at_all, panel_macros)}\n"
                    "    returned nothing with every variable at its default"
                )
                continue
            chosen = [v for v in named(query) if v in found and found[v] != at_all[v]]
            tries = TRIES_ONE if len(chosen) == 1 else TRIES
            candidates = itertools.product(*(found[v][:tries] for v in chosen))
            single = next(
                (
                    c
                    for c in candidates
                    if answer(
                        settings,
                        query,
                        ranked(
                            settings,
                            dashboard,
                            {**at_all, **dict(zip(chosen, ([x] for x in c), strict=True))},
                            panel_macros,
                            chosen,
                        ),
                        panel_macros,
                    )
                ),
                None,
            )
            if chosen and single is None and not _untagged(settings, query, chosen):
                failures.append(f"{title}: {query}\n    returned nothing for any single value of {chosen}")
                continue
            if chosen and single is not None:
                several = {
                    v: [x, next((y for y in found[v] if y != x), x)] for v, x in zip(chosen, single, strict=True)
                }
                several_ranked = ranked(settings, dashboard, {**at_all, **several}, panel_macros, chosen)
                if not answer(settings, query, several_ranked, panel_macros):
                    rendered = render(query, several_ranked, panel_macros)
                    failures.append(f"{title}: {rendered}\n    lost the data with several values")
        except AssertionError as error:
            failures.append(f"{title}: {query}\n    {error}")
    assert checked, f"{path.name} has no queries"
    assert not failures, f"{path.name}:\n" + "\n".join(failures)
