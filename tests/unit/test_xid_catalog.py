"""NVIDIA's whole Xid catalog in the registry: every Xid of the published table (counted against
the table itself), each with a class, a meaning and an action; an Xid the table does not list is
an unknown fault of the GPU, never dropped; an informational Xid is an alarm only when it
repeats, and one that undoes another clears it; a job-wide storm of application Xids is the
job's, not the GPUs'."""

from __future__ import annotations

import csv
from importlib import resources

from detectors.stack import DetectorStack
from rca.graph import TopologyGraph
from rca.incidents import IncidentEngine
from telemetry_gen.topology import build_fat_tree
from tests.unit.test_detectors import T0, gpu_line, job_tick, run, tick
from vocab import registry
from vocab.xid_catalog import CATALOG_SOURCE

CLASSES = {"hardware", "application", "driver", "memory", "fabric"}


def table() -> list[dict[str, str]]:
    text = resources.files("vocab").joinpath("xid_catalog.tsv").read_text(encoding="utf-8")
    return list(csv.DictReader((line for line in text.splitlines() if not line.startswith("#")), delimiter="\t"))


def test_every_xid_of_the_published_table_is_in_the_registry() -> None:
    rows = table()
    codes = [int(r["code"]) for r in rows]
    # the table numbers its Xids from 1 without a gap, and this edition ends at 172
    assert codes == list(range(1, len(rows) + 1)) and len(rows) == 172
    assert "R575" in CATALOG_SOURCE and "analyzing-xid-catalog" in CATALOG_SOURCE
    for row in rows:
        x = registry.XIDS[int(row["code"])]
        assert x.in_catalog and x.mnemonic == row["mnemonic"]
        assert x.xid_class in CLASSES, x
        assert x.meaning and x.action and x.severity in registry.SEVERITIES
        assert x.used == (row["description"] != "Unused")


def test_an_xid_the_catalog_does_not_list_is_an_unknown_gpu_fault() -> None:
    stack = DetectorStack(30)
    found = stack.process(T0 + 30, job_tick(30, g2={"xid": 231}))
    (a,) = [a for a in found if a.metric == "DCGM_FI_DEV_XID_ERRORS"]
    assert (a.entity, a.detail["suggests"], a.detail["meaning"]) == ("g2", "gpu_fault", "unknown XID 231")


def test_an_unknown_xid_opens_a_gpu_fault_incident() -> None:
    graph = TopologyGraph.from_json(build_fat_tree(64).to_json())
    stack, engine = DetectorStack(30), IncidentEngine(graph)
    line = gpu_line("n00003-gpu5", node="n00003", xid=231)
    found = stack.process(T0 + 30, tick(30, [line]))
    (incident,) = engine.process(T0 + 30, found, [])
    assert (incident.root.entity, incident.root.kind) == ("n00003-gpu5", "gpu_fault")


def test_an_informational_xid_is_an_alarm_only_when_it_repeats() -> None:
    # Xid 137 (NVLink privilege error): the catalog's immediate action is IGNORE
    assert registry.XIDS[137].repeat == (3, 86_400.0)
    stack = DetectorStack(30)
    seen = run(stack, [job_tick(t, g1={"xid": 137 if t % 60 == 30 else 0}) for t in range(30, 300, 30)])
    fired = [t for t, found in zip(range(30, 300, 30), seen, strict=True) if found]
    assert fired == [150]  # the third time, not the first or second
    # once is nothing, however long it stays set
    quiet = DetectorStack(30)
    assert run(quiet, [job_tick(t, g1={"xid": 137}) for t in range(30, 300, 30)]) == [[]] * 9


def test_power_smoothing_re_engaged_cancels_its_disengagement() -> None:
    assert registry.XIDS[162].cancels == 163
    stack = DetectorStack(30)
    codes = [163, 0, 163, 162, 163, 0, 163, 0, 163]  # two, undone, then three
    seen = run(stack, [job_tick(30 * (i + 1), g1={"xid": c}) for i, c in enumerate(codes)])
    assert [i for i, found in enumerate(seen) if found] == [8]


def test_a_job_wide_xid_45_storm_on_1024_gpus_opens_no_incident() -> None:
    graph = TopologyGraph.from_json(build_fat_tree(1024).to_json())
    stack, engine = DetectorStack(30), IncidentEngine(graph)
    gpus = [(f"n{n:05d}-gpu{g}", f"n{n:05d}") for n in range(128) for g in range(8)]
    calm = tick(0, [gpu_line(gpu, job="big", node=node) for gpu, node in gpus])
    storm = tick(30, [gpu_line(gpu, job="big", node=node, xid=45) for gpu, node in gpus])
    incidents = []
    for t, frames in ((T0, calm), (T0 + 30, storm)):
        incidents += engine.process(t, stack.process(t, frames), [])
    assert incidents == [] and stack.rules.application_xids == 1024


def test_the_storm_is_one_notice_for_the_job() -> None:
    from detectors.detect_loop import DetectLoop

    loop = DetectLoop(30)
    lines = [gpu_line(f"n{n:05d}-gpu{g}", job="big", node=f"n{n:05d}") for n in range(128) for g in range(8)]
    loop.analyse(T0, tick(0, lines))
    storm = [gpu_line(f"n{n:05d}-gpu{g}", job="big", node=f"n{n:05d}", xid=45) for n in range(128) for g in range(8)]
    found = loop.analyse(T0 + 30, tick(30, storm))
    assert [a for a in found if a.metric == "DCGM_FI_DEV_XID_ERRORS"] == []
    (notice,) = [n for n in loop.notices if n.kind == "xid_storm"]
    assert notice.subject == "big" and "1024 GPUs" in notice.message and "45" in notice.message
