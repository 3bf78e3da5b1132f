"""The dashboards at 10,000 GPUs (issue 66, point 7): the fabric's rates against the counters they
are taken from, and how many series each panel draws.

A 10,000-GPU fat tree (1,250 nodes, 10,000 NICs on 8 rails, 10,000 optics, 480 switches, 22,800
switch ports) is generated for 8 scrapes at 10 s, its collectors as a site's are (host clocks up
to 2 s off, 1 s of jitter, stamps in whole seconds) and its scrapes on the boundaries of Grafana's
intervals (a scrape at :59 is stamped :59, :00 or :01), with a PFC storm and a leaf going down
inside it. Its telemetry is written into a fresh database as the ingest service writes it
(InfluxWriter's batches, as `aiops bench dashboards` writes it) and `aiops run --influx` runs over
it. 70 s of scrapes are enough for rates and keep the test to a few minutes on two cores.

- Each rate of the fabric dashboard (per rail from the NICs, per switch from the switch ports) is
  sent as Grafana sends it when it asks for 10 s (a range of up to about three hours), 20 s (the
  dashboard's six hours) and 1 m (a day), never under the panel's own minimum interval: over the
  intervals it draws, the traffic it shows for a rail or a switch (its rate times each interval)
  equals what the recorded counters of that rail's NICs or that switch's ports counted over the
  same intervals, within 1 %; where no counter moved it shows no traffic.
- The per-switch panels draw the switches that counted most, the weakest-optics panel the optics
  with the lowest receive power.
- No panel of any dashboard returns more than 50 series at the variables' defaults, nor with a
  variable that picks one entity at its first, middle or last value (a table, which Grafana merges
  into rows, excepted).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aiops.cli import main
from aiops.dashboards_inventory import panels
from benchmarks.dashboards import _influxql, _seconds, _series, load, macros_for, render
from vocab.settings import InfluxSettings, Settings

pytestmark = [pytest.mark.services, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards" / "json"
FABRIC = DASHBOARDS / "fabric.json"

GPUS = 10_000
TICKS = 8
SCRAPE_S = 10
FAULTS = "pfc_storm=1,leaf_down=1"
# a site's collectors (the harsh realism's clocks), stamps falling either side of an interval
COLLECTORS = ("--clock-offset", "2", "--jitter", "1", "--truncate-seconds")
ASKED_S = (10, 20, 60)  # what Grafana asks for at up to ~3 h, at 6 h (the fabric's range), at a day
TOLERANCE = 0.01
MAX_SERIES = 50
SCRAPE_LOW_LIMIT = "10s"  # the data source's timeInterval (dashboards/provisioning/datasources)

DERIVATIVE = re.compile(
    r'non_negative_derivative\(\s*(?:\w+\(\s*)?"(?P<field>[^"]+)"\s*\)?\s*,\s*(?P<n>\d+)(?P<u>[smh])\)'
)
FROM = re.compile(r'FROM\s+"(\w+)"')
UNIT_S = {"s": 1, "m": 60, "h": 3600}
# where a fabric query's counters are recorded: the NICs for a rail, the ports for a switch
SOURCE = {"nic": ("nic", "nic", "rail"), "switch": ("switch_port", "port", "switch")}
SOURCE["switch_port"] = SOURCE["switch"]
TAGS = {source: (source, id_tag, group_tag) for source, id_tag, group_tag in SOURCE.values()}


@dataclass(frozen=True)
class History:
    settings: InfluxSettings
    folder: Path
    start_ns: int
    end_ns: int  # just after the last sample


@pytest.fixture(scope="module")
def history(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    suffix = uuid.uuid4().hex[:10]
    settings = services.influx.model_copy(update={"database": f"test_scale_{suffix}"})
    _series(_influxql(settings.model_copy(update={"database": ""}), f'CREATE DATABASE "{settings.database}"'))
    folder = tmp_path_factory.mktemp("cluster10k")
    # the first scrape one second before a minute: every interval Grafana asks for starts on one
    start = (int(time.time()) - TICKS * SCRAPE_S - 120) // 60 * 60 - 1
    hours = f"{(TICKS + 0.5) * SCRAPE_S / 3600:.6f}"  # the generator counts whole ticks in the span
    gen = ["gen", "--gpus", str(GPUS), "--hours", hours, "--interval", str(SCRAPE_S), "--seed", "66"]
    assert main([*gen, "--start", str(start), "--faults", FAULTS, *COLLECTORS, "--out", str(folder)]) == 0
    load(settings, folder / "telemetry.lp")
    to_influx = ["--influx", settings.url, "--database", settings.database]
    run = ["run", "--input", str(folder), "--out", str(folder / "run"), "--interval", str(SCRAPE_S), *to_influx]
    assert main(run) == 0
    try:
        yield History(settings, folder, start * 10**9, (start + TICKS * SCRAPE_S + 5) * 10**9)
    finally:
        _influxql(settings.model_copy(update={"database": ""}), f'DROP DATABASE "{settings.database}"')


# ---------------------------------------------------------------- what was recorded

Samples = list[tuple[int, float]]  # (time ns, value) of one series, in time order


@dataclass
class Recorded:
    """The counters of one measurement as the lines carry them: per field, per series (its id tag)
    its samples; and the group (rail or switch) each series belongs to."""

    counters: dict[str, dict[str, Samples]]
    group: dict[str, str]


def read_recorded(telemetry: Path, measurement: str, id_tag: str, group_tag: str, fields: set[str]) -> Recorded:
    counters: dict[str, dict[str, Samples]] = {f: defaultdict(list) for f in fields}
    group: dict[str, str] = {}
    prefix = measurement + ","
    with telemetry.open() as lines:
        for line in lines:
            if not line.startswith(prefix):
                continue
            head, values, stamp = line.split(" ")
            tags = dict(kv.split("=", 1) for kv in head.split(",")[1:])
            key = tags[id_tag]
            group[key] = tags[group_tag]
            t = int(stamp)
            for kv in values.split(","):
                name, _, value = kv.partition("=")
                if name in fields:
                    counters[name][key].append((t, float(value.rstrip("i"))))
    for per_series in counters.values():
        for samples in per_series.values():
            samples.sort()
    return Recorded(counters, group)


def counted(samples: Samples, interval_ns: int) -> float:
    """What the counter counted from the last sample of the first interval it has samples in to
    the last sample of the last: the sum of its steps, a step down being a restart from zero."""
    last_in: dict[int, int] = {}
    for i, (t, _) in enumerate(samples):
        last_in[t // interval_ns] = i
    first, last = last_in[min(last_in)], last_in[max(last_in)]
    steps = itertools.pairwise(v for _, v in samples[first : last + 1])
    return sum(b - a if b >= a else b for a, b in steps)


def counted_in_range(samples: Samples) -> float:
    return sum(b - a if b >= a else b for a, b in itertools.pairwise(v for _, v in samples))


# ---------------------------------------------------------------- what Grafana sends


def _low_limit_s(panel: dict[str, Any]) -> float:
    return _seconds(str(panel.get("interval") or SCRAPE_LOW_LIMIT))


def _macros(h: History, interval_s: float) -> dict[str, str]:
    window = f"time >= {h.start_ns - 60 * 10**9}ns AND time <= {h.end_ns + 60 * 10**9}ns"
    step = f"{interval_s:g}s"
    return {
        "timeFilter": window,
        "__timeFilter": window,
        "__interval": step,
        "interval": step,
        "__interval_ms": str(int(interval_s * 1000)),
    }


def resolve(
    settings: InfluxSettings, board: dict[str, Any], macros: dict[str, str], fixed: dict[str, list[str]] | None = None
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Each variable's value on first load, as Grafana resolves them in order (`fixed` ones as
    given): "All" at its allValue, or, without one, every value its query found; a variable
    without "All" at the first value found. Also the values each query variable found."""
    fixed = fixed or {}
    chosen: dict[str, list[str]] = {}
    found: dict[str, list[str]] = {}
    for v in board.get("templating", {}).get("list", []):
        name = v["name"]
        if v.get("type") != "query":
            current = (v.get("current") or {}).get("value") or v.get("query", "")
            chosen[name] = [str(current[0] if isinstance(current, list) else current)]
            continue
        query = v["query"]["query"] if isinstance(v.get("query"), dict) else str(v.get("query"))
        rows = [r for s in _series(_influxql(settings, render(query, chosen, macros))) for r in s["values"]]
        found[name] = sorted({str(r[-1]) for r in rows})
        if name in fixed:
            chosen[name] = fixed[name]
        elif v.get("includeAll"):
            chosen[name] = [str(v["allValue"])] if v.get("allValue") else (found[name] or [""])
        else:
            chosen[name] = found[name][:1] or [""]
    return chosen, found


def answer(settings: InfluxSettings, query: str) -> list[dict[str, Any]]:
    return _series(_influxql(settings, query))


# ---------------------------------------------------------------- the fabric's rates


def _fabric_rate_targets() -> list[tuple[dict[str, Any], dict[str, Any], str, str, float]]:
    """(panel, target, measurement read, counter, derivative unit in s) of each rate the fabric draws."""
    board = json.loads(FABRIC.read_text())
    out = []
    for panel in panels(board["panels"]):
        for target in panel.get("targets", []):
            query = str(target.get("query", ""))
            rate = DERIVATIVE.search(query)
            if rate is None:
                continue
            measurement = FROM.findall(query)[-1]
            assert measurement in SOURCE, f"{panel['title']}: a rate of {measurement}, which this test does not check"
            out.append((panel, target, measurement, rate["field"], float(rate["n"]) * UNIT_S[rate["u"]]))
    return out


def test_fabric_rates_match_the_counters(history: History) -> None:
    settings = history.settings
    board = json.loads(FABRIC.read_text())
    targets = _fabric_rate_targets()
    assert {m for _, _, m, _, _ in targets} >= {"nic"} and len(targets) >= 8
    fields_of: dict[str, set[str]] = defaultdict(set)
    for _, _, measurement, field, _ in targets:
        fields_of[SOURCE[measurement][0]].add(field)
    recorded = {
        source: read_recorded(history.folder / "telemetry.lp", *TAGS[source], fields)
        for source, fields in fields_of.items()
    }
    failures: list[str] = []
    checked = 0
    values, _ = resolve(settings, board, _macros(history, SCRAPE_S))  # no variable's query names the interval
    for panel, target, measurement, field, unit_s in targets:
        # what Grafana sends for each interval it may ask for: never under the panel's minimum
        for interval_s in sorted({max(asked, _low_limit_s(panel)) for asked in ASKED_S}):
            macros = _macros(history, interval_s)
            query = render(str(target["query"]), values, macros)
            source, _, group_tag = SOURCE[measurement]
            rec = recorded[source]
            truth: dict[str, float] = defaultdict(float)
            for key, samples in rec.counters[field].items():
                truth[rec.group[key]] += counted(samples, int(interval_s * 10**9))
            shown: dict[str, float] = {}
            for s in answer(settings, query):
                group = (s.get("tags") or {}).get(group_tag)
                assert group is not None, f"{panel['title']} [{target['refId']}]: a series without {group_tag}"
                # the rate times each interval: what the panel says was counted
                shown[group] = sum(v * interval_s / unit_s for _, v in s["values"] if v is not None)
            where = f"{panel['title']} [{target['refId']}] {field} at {interval_s:g}s"
            if group_tag == "rail":  # every rail is drawn
                missing = {g for g, c in truth.items() if c > 0} - set(shown)
                if missing:
                    failures.append(f"{where}: rails {sorted(missing)} counted but are not drawn")
            for group, drawn in sorted(shown.items()):
                checked += 1
                expected = truth.get(group, 0.0)
                if not math.isclose(drawn, expected, rel_tol=TOLERANCE, abs_tol=1e-9):
                    ratio = f"{drawn / expected:.3f}x" if expected else "nothing was counted"
                    failures.append(
                        f"{where}, {group_tag} {group}: draws {drawn:.6g} counted over its intervals, "
                        f"the counters {expected:.6g} ({ratio})"
                    )
    assert checked
    assert not failures, f"{len(failures)} of {checked} rates off:\n" + "\n".join(failures[:40])


def test_switch_and_optic_panels_draw_the_worst(history: History) -> None:
    """A per-switch query draws the switches whose counter counted most over the range (none that
    counted more than one it draws is left out); the weakest optics are those with the lowest
    receive power (none lower than one it draws is left out)."""
    settings = history.settings
    board = json.loads(FABRIC.read_text())
    telemetry = history.folder / "telemetry.lp"
    values, _ = resolve(settings, board, _macros(history, 20))
    failures: list[str] = []
    ranked = 0
    for panel in panels(board["panels"]):
        macros = _macros(history, max(20, _low_limit_s(panel)))
        for target in panel.get("targets", []):
            query = str(target.get("query", ""))
            rate = DERIVATIVE.search(query)
            where = f"{panel['title']} [{target['refId']}]"
            if rate is not None and FROM.findall(query)[-1] in ("switch", "switch_port"):
                rec = read_recorded(telemetry, "switch_port", "port", "switch", {rate["field"]})
                score: dict[str, float] = defaultdict(float)
                for key, samples in rec.counters[rate["field"]].items():
                    score[rec.group[key]] += counted_in_range(samples)
                worst_first = sorted(score.values(), reverse=True)
                shown = {(s.get("tags") or {}).get("switch") for s in answer(settings, render(query, values, macros))}
            elif FROM.findall(query)[-1:] == ["optic"]:
                rec = read_recorded(telemetry, "optic", "optic", "node", {"rx_power_dbm"})
                score = {k: -min(v for _, v in samples) for k, samples in rec.counters["rx_power_dbm"].items()}
                worst_first = sorted(score.values(), reverse=True)
                shown = {(s.get("tags") or {}).get("optic") for s in answer(settings, render(query, values, macros))}
            else:
                continue
            ranked += 1
            if None in shown or not shown or len(shown) > MAX_SERIES or len(shown) >= len(worst_first):
                failures.append(f"{where}: draws {len(shown)} of {len(worst_first)}, not the worst few by name")
                continue
            threshold = worst_first[len(shown) - 1]
            left_out = sorted(k for k, v in score.items() if v > threshold and k not in shown)
            if left_out:
                failures.append(f"{where}: leaves out {left_out[:5]}, worse than one it draws")
    assert ranked >= 6
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------- series per panel


def _merged_table(panel: dict[str, Any]) -> bool:
    return panel.get("type") == "table" and any(t.get("id") == "merge" for t in panel.get("transformations", []))


def test_no_panel_draws_more_than_50_series(history: History) -> None:
    settings = history.settings
    over: list[str] = []
    counts: dict[str, int] = {}
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        board_range = _seconds(board.get("time", {}).get("from", "now-6h"))
        base = macros_for(board_range, SCRAPE_S, history.end_ns)
        defaults, found = resolve(settings, board, base)
        # the defaults, then each variable that picks one entity at its first, middle and last value
        settings_tried: list[tuple[str, dict[str, list[str]]]] = [("defaults", {})]
        for v in board.get("templating", {}).get("list", []):
            name = v["name"]
            if v.get("type") == "query" and not v.get("includeAll") and found.get(name):
                values = found[name]
                for x in dict.fromkeys((values[0], values[len(values) // 2], values[-1])):
                    settings_tried.append((f"${name}={x}", {name: [x]}))
        for label, fixed in settings_tried:
            chosen = resolve(settings, board, base, fixed)[0] if fixed else defaults
            for panel in panels(board["panels"]):
                if panel.get("type") == "row" or _merged_table(panel):
                    continue
                queries = [str(t.get("query", "")) for t in panel.get("targets", [])]
                if fixed and not any(re.search(rf"\${{?{n}\b", q) for q in queries for n in _depending(board, fixed)):
                    continue
                low = max(SCRAPE_S, _low_limit_s(panel))
                span = _seconds(panel["timeFrom"]) if panel.get("timeFrom") else board_range
                macros = macros_for(span, low, history.end_ns)
                drawn = sum(len(answer(settings, render(q, chosen, macros))) for q in queries)
                key = f"{path.name} {panel['title']!r}"
                counts[key] = max(counts.get(key, 0), drawn)
                if drawn > MAX_SERIES:
                    over.append(f"{key} ({label}): {drawn} series")
    assert counts
    assert not over, f"panels over {MAX_SERIES} series at {GPUS:,} GPUs:\n" + "\n".join(over)


def _depending(board: dict[str, Any], fixed: dict[str, list[str]]) -> set[str]:
    """The fixed variables and those whose queries name them (resolved again after them)."""
    names = set(fixed)
    for v in board.get("templating", {}).get("list", []):
        query = v["query"]["query"] if isinstance(v.get("query"), dict) else str(v.get("query", ""))
        if any(re.search(rf"\${{?{n}\b", query) for n in names):
            names.add(v["name"])
    return names
