"""Issue 66's acceptance: one incident record, true in every view. One fault of every kind the
generator injects, run as the daemon runs it (the shipped dry-run policies of config/actions.yml
acting, a chat webhook notified, the index the API serves filled from the same records as the
daemon fills it), then for each kind's incident four views read side by side:

- the API's JSON (`/api/incidents/<id>`, `/api/actions`),
- the list page the daemon serves (`/incidents`), its row in a real Chromium,
- the incident's page the daemon serves (`/incidents/<id>`), in Chromium,
- the last chat message about it (our signed JSON webhook, as a local endpoint took it),

and each must give the same GPUs hit, the same state and the same plans. Before issue 66 the list
and chat said 352 GPUs where the page said 136, chat said RESOLVED for a GPU still silent, and the
page said no policy planned anything where the audit log held five plans."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from act.policy import load as load_policies
from aiops.api import ActionsApi, ApiServer, PageContext, build_app
from aiops.daemon_metrics import DaemonMetrics
from aiops.incident_index import IncidentIndex
from aiops.pipeline import run_folder
from notify.config import parse as parse_notify
from notify.service import Notifier
from rca.evaluate import latest_states
from rca.graph import TopologyGraph
from show.report import read_events
from tests.browser import Browser
from tests.faults.test_notify_kill import _get
from tests.http_endpoint import Endpoint
from tests.show_run import ALL_KINDS, ShownRun, all_kinds_run  # noqa: F401 (fixture)
from vocab.incident_record import IncidentRecord
from vocab.schedule import Schedule

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    base: str
    hook: Endpoint
    truth: list[dict[str, Any]]
    latest: list[dict[str, Any]]
    states: list[IncidentRecord]  # every state the run published, in order


@pytest.fixture(scope="module")
def served(all_kinds_run: ShownRun, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:  # noqa: F811
    folder = tmp_path_factory.mktemp("views-agree")
    hook = Endpoint()
    config = parse_notify(
        {
            "public_url": "http://aiops.example:8080",
            "receivers": [{"name": "chat", "kind": "webhook", "url": hook.url}],
            "routes": [{"receiver": "chat", "group_wait": "0s", "group_by": ["incident_id"]}],
        }
    )
    notifier = Notifier(config, folder / "outbox.sqlite")
    index = IncidentIndex(folder / "incidents.sqlite")

    def into_index(records: list[IncidentRecord]) -> None:  # as the daemon's pipeline adds them
        index.add(records)

    run_folder(
        all_kinds_run.input,
        folder / "out",
        30,
        incident_sink=into_index,
        notifier=notifier,
        actions=load_policies(ROOT / "config" / "actions.yml"),
    )
    notifier.start()
    notifier.stop(drain_s=60.0)  # every message due is sent before the views are compared
    events, _ = read_events(all_kinds_run.input / "events.jsonl")
    pages = PageContext(
        graph=TopologyGraph.load(all_kinds_run.input / "topology.json"), schedule=Schedule.from_events(events)
    )
    actions = ActionsApi(folder / "out" / "actions.sqlite", lambda plan, who: None, b"views-agree")
    app = build_app(index, DaemonMetrics(), None, None, deque().append, pages, actions)
    server = ApiServer(app, "127.0.0.1", 0)
    server.start()
    lines = (folder / "out" / "incidents.jsonl").read_text().splitlines()
    states = [IncidentRecord.from_json(line) for line in lines if line.strip()]
    latest = [dict(r) for r in latest_states(json.loads(line) for line in lines if line.strip())]
    try:
        yield Served(f"http://127.0.0.1:{server.port}", hook, all_kinds_run.truth, latest, states)
    finally:
        server.stop()
        index.close()
        hook.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser() as b:
        yield b


def _incident_of(served: Served, kind: str) -> dict[str, Any]:
    roots = {f["root"] for f in served.truth if f["kind"] == kind}
    found = [r for r in served.latest if r["status"] != "warning" or r.get("resolved") is None]
    chosen = next((r for r in found if r["root_cause"]["kind"] == kind), None) or next(
        (r for r in found if r["root_cause"]["entity"] in roots), None
    )
    if chosen is None:
        pytest.skip(f"the engine opened no incident for the {kind} fault of this run")
    return chosen


def _last_message(hook: Endpoint, incident_id: str) -> dict[str, Any]:
    said = [i for body in hook.bodies for i in body["incidents"] if i["incident_id"] == incident_id]
    assert said, f"no chat message about {incident_id}"
    return said[-1]


ROW = """const row = document.querySelector(`#incidents tr[data-id="${arguments[0]}"]`);
return row && {state: row.dataset.state, gpus: Number(row.dataset.gpusHit), plans: Number(row.dataset.plans)};"""
PAGE = """return {state: document.getElementById('state').dataset.state,
  gpus: Number(document.querySelector('[data-gpus-hit-total]').dataset.gpusHitTotal),
  plans: [...document.querySelectorAll('#plans tr[data-plan]')].map(r => r.dataset.plan)};"""


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_the_page_the_list_chat_and_the_api_give_the_same_gpus_state_and_plans(
    browser: Browser, served: Served, kind: str
) -> None:
    incident = _incident_of(served, kind)
    ident = incident["incident_id"]
    api = _get(f"{served.base}/api/incidents/{ident}")
    record = IncidentRecord.from_dict(api)
    plans = sorted(p["plan_id"] for p in _get(f"{served.base}/api/actions") if p["incident_id"] == ident)

    browser.open(f"{served.base}/incidents?limit=1000")
    assert browser.console_errors() == []
    row = browser.execute(ROW, ident)
    assert row is not None, f"{ident} is not in the list"
    browser.open(f"{served.base}/incidents/{ident}")
    assert browser.console_errors() == []
    page = browser.execute(PAGE)
    chat = _last_message(served.hook, ident)

    assert api["state"] == record.state  # the API says what the record's rule says
    assert row["state"] == page["state"] == record.state, (row, page)
    assert row["gpus"] == page["gpus"] == record.gpus_hit, (row, page)
    assert sorted(page["plans"]) == plans and row["plans"] == len(plans), (row, page, plans)
    # chat speaks when the state changes: it says what the record said then (the page's history
    # lists that state too), no number of its own; its plans are those planned by then, as the
    # page words them
    then = [s for s in served.states if s.incident_id == ident and s.at == chat["at"]]
    assert then, f"chat's message about {ident} at {chat['at']} matches no state the engine published"
    assert (chat["state"], chat["gpus_hit"]) == (then[-1].state, then[-1].gpus_hit), (chat, then[-1])
    assert chat["state"] == record.state or record.state != "resolved"  # a resolve is always said
    page_plans = browser.execute(
        "return [...document.querySelectorAll('#plans tr[data-plan]')].map(r => r.textContent)"
    )
    assert len(chat["plans"]) <= len(plans) and len(page_plans) == len(plans)
    # the file the run wrote holds the same state as the API serves (one record, one serialisation)
    assert IncidentRecord.from_dict(incident).state == record.state
