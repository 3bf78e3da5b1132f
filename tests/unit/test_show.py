"""The incident page and the run report, checked for what they show, not only that they exist:
the topology around each root with the root outlined and the sick entities filled, sparklines with
samples, the timeline with one mark per injected fault, PNGs with something drawn on them; the
daemon's API serving the page and refusing an acknowledgement without the token."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path

import pytest

from aiops.api import ApiServer, PageContext, build_app
from aiops.daemon_metrics import DaemonMetrics
from aiops.incident_index import IncidentIndex
from rca.graph import TopologyGraph
from show.report import write_report
from show.topology_svg import neighbourhood, to_svg
from tests.show_run import KINDS, ShownRun, shown_run  # noqa: F401 (a fixture)

ENTITY = re.compile(r'<g class="([^"]*)" data-entity="([^"]*)"')


def _boxes(html: str) -> dict[str, set[str]]:
    return {entity: set(classes.split()) for classes, entity in ENTITY.findall(html)}


@pytest.mark.parametrize("kind", KINDS)
def test_the_picture_shows_the_root_outlined_among_the_sick(shown_run: ShownRun, kind: str) -> None:  # noqa: F811
    graph = TopologyGraph.load(shown_run.input / "topology.json")
    incident = shown_run.of_kind(kind)
    root = incident["root_cause"]["entity"]
    picture = neighbourhood(graph, root, incident["affected"])
    boxes = _boxes(to_svg(picture))
    assert {"root", "sick"} <= boxes[root]
    assert [e for e, c in boxes.items() if "root" in c] == [root]
    rows = dict(picture.rows)
    if kind == "leaf_down":  # its hosts below it, all of them cut off
        assert len(rows["nic"]) > 4 and all("sick" in boxes[n] for n in rows["nic"])
    elif kind == "pfc_storm":  # the plane: the spines above the leaf (and the leaves they reach)
        assert rows["spine"] and root in rows["nic"] and rows["leaf"]
        assert sum("sick" in boxes[n] for n in rows["nic"]) > 1
    elif kind == "rack_cooling":  # the loop, its rack, the rack's nodes
        assert rows["rack"] and len(rows["node"]) >= 2
    else:  # the node it powers, with its GPUs
        assert len(rows["gpu"]) == 8 and graph.node_of(root) in rows["node"]


def test_the_report_shows_every_fault_and_every_incident(shown_run: ShownRun, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "report"
    done = write_report(shown_run.out, out, shown_run.input / "truth.jsonl")
    index = (out / "index.html").read_text()
    timeline = index[index.index('<svg xmlns="http://www.w3.org/2000/svg" class="timeline"') :]
    timeline = timeline[: timeline.index("</svg>")]
    marks = re.findall(r'<rect class="fault" data-id="([^"]+)"', timeline)
    assert sorted(marks) == sorted(f["fault_id"] for f in shown_run.truth)  # one mark per fault
    assert len(re.findall(r'<rect class="incident', timeline)) == sum(
        i["status"] != "warning" for i in shown_run.incidents
    )
    assert done["pages"] == len(shown_run.incidents)
    for kind in KINDS:
        incident = shown_run.of_kind(kind)
        page = (out / "incidents" / f"{incident['incident_id']}.html").read_text()
        assert {"root", "sick"} <= _boxes(page)[incident["root_cause"]["entity"]]
        points = [int(n) for n in re.findall(r'class="spark" [^>]*data-points="(\d+)"', page)]
        assert points and max(points) >= 10, f"{kind}: the sparklines should hold the series around onset"
        assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched
    import matplotlib.image

    for png in done["pngs"]:
        pixels = matplotlib.image.imread(out / png)
        assert pixels.shape[0] > 200 and pixels.shape[1] > 400
        assert len({tuple(p) for p in pixels.reshape(-1, pixels.shape[2])[::97]}) > 5  # more than a blank canvas


def test_the_daemon_serves_the_page_and_the_list(shown_run: ShownRun, tmp_path: Path) -> None:  # noqa: F811
    index = IncidentIndex(tmp_path / "incidents.sqlite")
    lines = (shown_run.out / "incidents.jsonl").read_text().splitlines()
    index.add([line.encode() for line in lines if line])
    pages = PageContext(graph=TopologyGraph.load(shown_run.input / "topology.json"))
    closing: deque[str] = deque()
    app = build_app(index, DaemonMetrics(), None, "tok", closing.append, pages)
    server = ApiServer(app, "127.0.0.1", 0)
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        leaf = shown_run.of_kind("leaf_down")
        with urllib.request.urlopen(f"{base}/incidents/{leaf['incident_id']}") as r:
            page = r.read().decode()
            assert r.headers["content-type"].startswith("text/html")
        assert {"root", "sick"} <= _boxes(page)[leaf["root_cause"]["entity"]]
        assert page.count("<tr><td>") >= 2  # the history of its states, from the index
        with urllib.request.urlopen(f"{base}/incidents?kind=leaf_down") as r:
            listed = r.read().decode()
        assert leaf["incident_id"] in listed and shown_run.of_kind("psu_failure")["incident_id"] not in listed
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{base}/incidents/inc-nope")
        assert missing.value.code == 404
        missing.value.close()
        body = json.dumps({"by": "me", "comment": "looking"}).encode()
        ack = urllib.request.Request(f"{base}/api/incidents/{leaf['incident_id']}/ack", body, method="POST")
        ack.add_header("Content-Type", "application/json")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(ack)
        assert refused.value.code == 401
        refused.value.close()
    finally:
        server.stop()
        index.close()
