"""Issue 66, parts 1 and 6, where people read it: a silent incident says "no data since HH:MM" in
chat, to Alertmanager (still firing), in the list and on its page, whose sparkline draws the gap;
a reopened incident says so, and each episode is notified under its own key (the outbox sends a
key once: the same key would drop the reopening and leave chat saying RESOLVED)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from notify.alertmanager import alert_of
from notify.config import parse
from notify.message import IncidentNote, Notification
from notify.router import Router
from show.page import render_incident, render_list
from show.spark import sparkline
from show.topology_svg import Picture

T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC
GPU = "n00003-gpu5"


def record(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "incident_id": "inc-20260101T000100Z-0123456789",
        "opened": T0 + 60,
        "updated": T0 + 3600,
        "resolved": None,
        "status": "open",
        "severity": "critical",
        "root_cause": {"entity": GPU, "kind": "gpu_fell_off_bus", "confidence": 1.0},
        "candidates": [{"entity": GPU, "kind": "gpu_fell_off_bus", "score": 3.0}],
        "affected": [GPU],
        "affected_count": 1,
        "jobs": [],
        "gpus_hit": 1,
        "evidence": [],
        "evidence_count": 1,
        "action": "drain the node and power-cycle it",
        "warned": None,
        "no_data_since": T0 + 360,  # 00:06
        "no_data_entities": [GPU],
        "episodes": [{"opened": T0 + 60, "resolved": None}],
    }
    return {**base, **changes}


def test_chat_says_no_data_since_not_resolved() -> None:
    note = IncidentNote.from_record(record())
    assert note.status == "open" and note.headline.startswith("NO DATA since 00:06 UTC [CRITICAL]")
    facts = dict(note.facts())
    assert facts["No data since"].startswith("2026-01-01 00:06:00 UTC")
    back = IncidentNote.from_record(record(no_data_since=None, no_data_entities=[]))
    assert back.headline.startswith("[CRITICAL]") and "No data since" not in dict(back.facts())


def test_alertmanager_keeps_a_silent_incident_firing_and_says_since_when() -> None:
    alert = alert_of(IncidentNote.from_record(record()), {}, None)
    assert alert["annotations"]["no_data_since"] == "2026-01-01T00:06:00.000Z"
    assert "endsAt" not in alert  # the pusher sets it ahead while firing
    assert alert["annotations"]["summary"].startswith("NO DATA since 00:06 UTC")


def _router() -> tuple[Router, list[Notification]]:
    sent: list[Notification] = []
    config = parse(
        yaml.safe_load(
            "receivers: [{name: oncall, kind: webhook, url: 'http://h/'}]\n"
            "routes: [{receiver: oncall, group_wait: 30s, group_interval: 5m, repeat_interval: 4h}]\n"
        )
    )
    return Router(config, sent.append), sent


def test_each_episode_is_notified_under_its_own_key() -> None:
    router, sent = _router()
    first = [{"opened": T0, "resolved": None}]
    ended = [{"opened": T0, "resolved": T0 + 1200}]
    again = [*ended, {"opened": T0 + 1800, "resolved": None}]
    over = [*ended, {"opened": T0 + 1800, "resolved": T0 + 3000}]
    plain: dict[str, Any] = {"no_data_since": None, "no_data_entities": [], "opened": T0}
    states = {
        T0: record(**plain, updated=T0, episodes=first),
        T0 + 1200: record(**plain, updated=T0 + 1200, status="resolved", resolved=T0 + 1200, episodes=ended),
        T0 + 1800: record(**plain, updated=T0 + 1800, episodes=again),
        T0 + 3000: record(**plain, updated=T0 + 3000, status="resolved", resolved=T0 + 3000, episodes=over),
    }
    t = T0
    while t <= T0 + 4000:
        router.offer([states[t]] if t in states else [])
        router.advance(t)
        t += 30
    keys = [n.key for n in sent]
    assert len(keys) == len(set(keys)) == 4, keys
    assert [n.incidents[0].status for n in sent] == ["open", "resolved", "open", "resolved"]
    reopened = sent[2].incidents[0]
    assert reopened.headline.startswith("REOPENED (episode 2) [CRITICAL]")
    assert dict(reopened.facts())["Episodes"].startswith("2: it resolved and came back")
    assert dict(sent[3].incidents[0].facts())["Open for"] == "20 min"  # this episode's, not since T0


def test_the_list_and_the_page_say_no_data_since_and_the_episodes() -> None:
    listed = render_list([record()], lambda i: f"/incidents/{i}")
    assert 'open<span class="no-data">, no data since 2026-01-01 00:06:00 UTC</span>' in listed
    episodes = [{"opened": T0 + 60, "resolved": T0 + 1000}, {"opened": T0 + 1800, "resolved": None}]
    page = render_incident(record(episodes=episodes), Picture([("gpu", [GPU])], root=GPU), {})
    assert re.search(r'id="no-data">no data since 2026-01-01 00:06:00 UTC<', page)
    assert 'id="episodes"' in page and page.count("<tr><td>") >= 2 and "came back 1 times" in page
    assert "(2 episodes)" in render_list([record(episodes=episodes)], lambda i: i)


def test_the_sparkline_draws_the_gap() -> None:
    points = [(T0 + 30 * n, 60.0) for n in range(12)]  # samples to 00:05:30, then nothing
    svg = sparkline(points, T0 + 60, metric="DCGM_FI_DEV_GPU_TEMP", no_data_since=T0 + 330, until=T0 + 1800)
    assert 'data-gaps="1"' in svg and 'class="no-data"' in svg and "no data 00:05-00:30" in svg
    # a gap inside the series: no line across it
    holed = [*points[:4], *points[10:]]
    svg = sparkline(holed, T0, metric="DCGM_FI_DEV_GPU_TEMP")
    assert 'data-gaps="1"' in svg and svg.count("<polyline") == 2
    # the series alone, no gap: drawn as before
    assert 'data-gaps="0"' in sparkline(points, T0, metric="DCGM_FI_DEV_GPU_TEMP")
    # back and resolved since: the window drawn still shows the samples stopping short of its end
    ended = sparkline(points, T0, metric="DCGM_FI_DEV_GPU_TEMP", until=T0 + 1800)
    assert 'data-gaps="1"' in ended and "no data 00:05-00:30" in ended
    assert 'data-gaps="0"' in sparkline(points, T0, metric="DCGM_FI_DEV_GPU_TEMP", until=T0 + 360)  # one step short


def test_the_page_shades_the_silent_gpus_series() -> None:
    series = {(GPU, "DCGM_FI_DEV_GPU_TEMP"): [(T0 + 30 * n, 60.0) for n in range(12)]}
    page = render_incident(record(), Picture([("gpu", [GPU])], root=GPU), series)
    assert 'data-gaps="1"' in page and "no data 00:06-00:31" in page
