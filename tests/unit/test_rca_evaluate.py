"""Run evaluation: the measures of docs/accuracy.md on small hand-made truth, incidents and predictions."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from rca.evaluate import EvaluationError, evaluate_many, evaluate_paths, evaluate_run, load_contains

ONSET = 10_000.0
HOUR = 3600.0


def fault(
    fid: str = "f1",
    kind: str = "gpu_thermal",
    root: str = "gpu1",
    onset: float = ONSET,
    end: float = ONSET + 1200,
    precursor: float | None = None,
    affected: tuple[str, ...] = ("gpu1", "node1"),
) -> dict[str, Any]:
    return {
        "fault_id": fid,
        "kind": kind,
        "root": root,
        "onset": onset,
        "end": end,
        "precursor_start": precursor,
        "affected": list(affected),
        "jobs": [],
        "severity": 0.5,
    }


def incident(
    iid: str = "i1",
    opened: float = ONSET + 30,
    root: str = "gpu1",
    kind: str = "gpu_thermal",
    candidates: tuple[str, ...] | None = None,
    affected: tuple[str, ...] = (),
    status: str = "open",
) -> dict[str, Any]:
    ranked = (root,) if candidates is None else candidates
    return {
        "incident_id": iid,
        "opened": opened,
        "updated": opened,
        "resolved": None,
        "status": status,
        "severity": "major",
        "root_cause": {"entity": root, "kind": kind, "confidence": 0.9},
        "candidates": [{"entity": e, "kind": kind, "score": 1.0 / (n + 1)} for n, e in enumerate(ranked)],
        "affected": list(affected),
        "jobs": [],
        "evidence": [],
        "action": "drain",
    }


def prediction(entity: str, at: float, horizon_s: float = 6 * HOUR) -> dict[str, Any]:
    return {"entity": entity, "at": at, "kind": "gpu_hbm_ecc", "probability": 0.9, "horizon_s": horizon_s}


@pytest.mark.parametrize(
    ("inc", "detected", "ttd"),
    [
        pytest.param(incident(opened=ONSET), True, 0.0, id="at-onset"),
        pytest.param(incident(opened=ONSET + 600), True, 600.0, id="window-end"),
        pytest.param(incident(opened=ONSET + 601), False, None, id="one-second-late"),
        pytest.param(incident(opened=ONSET - 1), False, None, id="before-onset"),
        pytest.param(incident(root="node1", affected=("gpu1",)), True, 30.0, id="root-in-affected"),
        pytest.param(incident(root="node1", affected=("node1",)), False, None, id="fault-affected-only"),
        pytest.param(incident(status="warning"), False, None, id="warning-is-not-detection"),
    ],
)
def test_detection_window(inc: dict[str, Any], detected: bool, ttd: float | None) -> None:
    r = evaluate_run([fault()], [inc], [], interval_s=10.0)
    assert r.overall.detected == int(detected)
    if ttd is None:
        assert math.isnan(r.overall.ttd_p50_s)
    else:
        assert r.overall.ttd_p50_s == ttd and r.overall.ttd_p50_ticks == ttd / 10


def test_ttd_percentiles_over_faults() -> None:
    truth = [fault(f"f{n}", root=f"gpu{n}", onset=ONSET + n * HOUR) for n in range(5)]
    incs = [incident(f"i{n}", opened=ONSET + n * HOUR + 10 * n, root=f"gpu{n}") for n in range(5)]
    r = evaluate_run(truth, incs, [])
    assert r.overall.ttd_p50_s == 20.0 and r.overall.ttd_p95_s == pytest.approx(38.0)
    assert r.overall.recall == 1.0 and math.isnan(r.overall.ttd_p50_ticks)


@pytest.mark.parametrize(
    ("candidates", "top1", "top3"),
    [
        (("gpu1", "gpu2", "gpu3"), 1, 1),
        (("gpu2", "gpu1", "gpu3"), 0, 1),
        (("gpu2", "gpu3", "gpu4", "gpu1"), 0, 0),
        ((), 1, 1),  # no candidates: the root cause is the ranking
    ],
)
def test_top1_top3(candidates: tuple[str, ...], top1: int, top3: int) -> None:
    r = evaluate_run([fault()], [incident(candidates=candidates)], [])
    assert (r.overall.top1_count, r.overall.top3_count) == (top1, top3)
    assert (r.overall.top1, r.overall.top3) == (float(top1), float(top3))


def test_root_naming_incident_owns_the_fault_but_the_first_one_sets_ttd() -> None:
    symptom = incident("i1", opened=ONSET + 10, root="node1", affected=("gpu1",))
    owner = incident("i2", opened=ONSET + 50, root="gpu1")
    r = evaluate_run([fault()], [symptom, owner], [])
    assert r.overall.ttd_p50_s == 10.0 and r.overall.top1_count == 1


def test_latest_state_per_incident_wins() -> None:
    first = incident("i1", root="gpu9", candidates=("gpu9", "gpu8", "gpu7"))
    later = incident("i1", root="gpu1")
    assert evaluate_run([fault()], [first, later], []).overall.top1_count == 1
    assert evaluate_run([fault()], [later, first], []).overall.detected == 0
    # a prediction that stayed a warning is not an incident at all
    r = evaluate_run(
        [fault()],
        [incident("i1"), incident("w1", root="gpu5", status="open"), incident("w1", root="gpu5", status="warning")],
        [],
    )
    assert (r.overall.incidents, r.warnings, r.overall.precision) == (1, 1, 1.0)


@pytest.mark.parametrize(
    ("inc", "true"),
    [
        pytest.param(incident(opened=ONSET + 100), True, id="in-window"),
        pytest.param(incident(opened=ONSET + 1200 + 600), True, id="while-active"),
        pytest.param(incident(opened=ONSET + 1200 + 601), False, id="after-end"),
        pytest.param(incident(opened=ONSET - 5), False, id="before-onset"),
        pytest.param(incident(root="switch7", affected=("node1",)), True, id="affected-overlap"),
        pytest.param(incident(root="gpu4", affected=("node2",)), False, id="elsewhere"),
    ],
)
def test_precision_matching(inc: dict[str, Any], true: bool) -> None:
    r = evaluate_run([fault()], [incident("i0"), inc | {"incident_id": "x"}], [])
    assert r.overall.precision == (1.0 if true else 0.5)
    assert [fp["incident_id"] for fp in r.false_positives] == ([] if true else ["x"])
    assert r.false_positive_count == (0 if true else 1)


def test_per_kind_attribution() -> None:
    truth = [
        fault("f1", "gpu_thermal", "gpu1", affected=("gpu1", "node1")),
        fault("f2", "psu_failure", "psu1", affected=("psu1", "node1", "gpu1")),
    ]
    incs = [
        incident("i1", root="psu1", kind="psu_failure", affected=("node1", "gpu1")),  # root match wins
        incident("i2", root="node1", kind="node"),  # overlap only: earliest fault, f1
        incident("i3", root="gpu7", kind="gpu_thermal"),  # false positive claiming gpu_thermal
        incident("i4", root="gpu8", kind="gpu"),  # false positive claiming no fault kind
    ]
    r = evaluate_run(truth, incs, [])
    thermal, psu = r.kinds["gpu_thermal"], r.kinds["psu_failure"]
    assert (thermal.true_incidents, thermal.incidents, thermal.precision) == (1, 2, 0.5)
    assert (psu.true_incidents, psu.incidents, psu.precision) == (1, 1, 1.0)
    assert (r.overall.true_incidents, r.overall.incidents, r.overall.precision) == (2, 4, 0.5)
    assert [(fp["root"], fp["kind"]) for fp in r.false_positives] == [("gpu7", "gpu_thermal"), ("gpu8", "gpu")]
    # an incident is credited to one fault at most: i1 names the PSU as its cause, so it is the
    # PSU's; nothing else names gpu1, so the thermal fault went undetected
    assert r.kinds["gpu_thermal"].detected == 0 and r.kinds["psu_failure"].detected == 1


def test_an_incident_is_credited_to_one_fault_at_most() -> None:
    truth = [
        fault("f1", "gpu_thermal", "gpu1", affected=("gpu1", "node1")),
        fault("f2", "gpu_thermal", "gpu2", affected=("gpu2", "node1")),
    ]
    one = [incident("i1", root="node1", kind="node", affected=("gpu1", "gpu2"))]
    assert evaluate_run(truth, one, []).overall.detected == 1
    two = [*one, incident("i2", root="gpu2", affected=("node1",))]
    r = evaluate_run(truth, two, [])
    assert r.overall.detected == 2 and r.overall.top1_count == 1  # f2 by its own root, f1 by i1


def test_top1_at_the_first_and_the_last_state() -> None:
    wrong_then_right = [
        incident("i1", root="gpu9", candidates=("gpu9", "gpu1"), affected=("gpu1",)),
        incident("i1", root="gpu1", candidates=("gpu1", "gpu9")),
    ]
    r = evaluate_run([fault()], wrong_then_right, [])
    assert (r.overall.top1, r.overall.top1_first) == (1.0, 0.0)


def test_false_incidents_per_gpu_day_and_severity_bands() -> None:
    truth = [fault() | {"severity": 0.1}, fault("f2", root="gpu5", affected=("gpu5",)) | {"severity": 0.9}]
    incs = [incident("i1"), incident("x", root="gpu7")]
    r = evaluate_run(truth, incs, [], gpu_days=500.0, notices=3)
    assert r.false_positive_count == 1 and r.false_per_1000_gpu_days == 2.0 and r.notices == 3
    assert r.bands["faint (<0.3)"].recall == 1.0 and r.bands["plain (>=0.7)"].recall == 0.0


@pytest.mark.parametrize(
    ("at", "hit"),
    [
        pytest.param(ONSET, False, id="onset-equals-t"),
        pytest.param(ONSET - 6 * HOUR, True, id="onset-equals-t-plus-horizon"),
        pytest.param(ONSET - 6 * HOUR - 1, False, id="beyond-horizon"),
        pytest.param(ONSET - 1, True, id="just-before"),
    ],
)
def test_prediction_horizon_boundaries(at: float, hit: bool) -> None:
    truth = [fault(precursor=ONSET - 8 * HOUR)]
    r = evaluate_run(truth, [], [prediction("gpu1", at), prediction("gpu2", at)])
    assert (r.predictions, r.prediction_hits, r.prediction_precision) == (2, int(hit), 0.5 if hit else 0.0)


def test_prediction_recall_and_median_lead() -> None:
    truth = [
        fault("f1", root="gpu1", precursor=0.0),
        fault("f2", root="gpu2", precursor=0.0),
        fault("f3", root="gpu3", precursor=0.0),
        fault("f4", root="gpu4", precursor=0.0),
        fault("f5", root="gpu5", kind="gpu_straggler"),  # no precursor: outside prediction recall
    ]
    preds = [
        prediction("gpu1", ONSET - 0.5 * HOUR),
        prediction("gpu1", ONSET - 1 * HOUR),  # the longest lead per fault counts
        prediction("gpu2", ONSET - 2 * HOUR),
        prediction("gpu3", ONSET - 4 * HOUR),
        prediction("gpu4", ONSET - 0.25 * HOUR),  # too late to drain at a checkpoint
        prediction("gpu5", ONSET - 2 * HOUR),
    ]
    r = evaluate_run(truth, [], preds)
    k = r.kinds["gpu_thermal"]
    assert (k.predictable, k.predicted, k.prediction_recall, k.median_lead_h) == (4, 3, 0.75, 2.0)
    assert r.kinds["gpu_straggler"].predictable == 0 and r.prediction_precision == 1.0
    assert evaluate_run(truth, [], preds, min_lead_s=600).overall.predicted == 4
    # faults too close to when the predictor could first speak are left out
    late = evaluate_run(truth, [], preds, earliest=ONSET - 0.4 * HOUR)
    assert (late.overall.predictable, late.overall.predicted) == (0, 0)
    assert math.isnan(late.overall.prediction_recall)


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def run_folder(tmp_path: Path, topology: bool) -> tuple[Path, Path]:
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    out.mkdir()
    truth = [
        fault("f1", "gpu_hbm_ecc", "gpu1", precursor=0.0),
        fault("f2", "optic_degradation", "optic1", precursor=0.0, affected=("optic1", "nic1")),
    ]
    write_jsonl(data / "truth.jsonl", truth)
    write_jsonl(out / "incidents.jsonl", [incident(opened=ONSET + 60)])
    preds = [prediction("node1", ONSET - HOUR), prediction("rack1", ONSET - HOUR), prediction("optic1", ONSET - HOUR)]
    write_jsonl(out / "predictions.jsonl", preds)
    (out / "run.json").write_text(json.dumps({"interval_s": 20.0, "started": 0.0}))
    if topology:
        links = [
            ("rack1", "node1", "contains"),
            ("node1", "gpu1", "contains"),
            ("node1", "nic1", "contains"),
            ("nic1", "optic1", "contains"),
            ("gpu1", "node1", "powers"),  # not containment: must not make gpu1 a container
        ]
        nodes = [{"id": e, "kind": e.rstrip("0123456789")} for e in ("rack1", "node1", "gpu1", "nic1", "optic1")]
        edges: list[dict[str, Any]] = [{"source": s, "target": t, "relation": r} for s, t, r in links]
        edges.append({"source": "gpu1", "target": "optic1"})  # no relation at all: ignored too
        doc = {"directed": True, "graph": {"gpus": 1}, "nodes": nodes, "links": edges}
        (data / "topology.json").write_text(json.dumps(doc))
    return data / "truth.jsonl", out


def test_contains_based_prediction_via_topology(tmp_path: Path) -> None:
    truth, out = run_folder(tmp_path, topology=True)
    assert load_contains(truth.parent / "topology.json") == {
        "rack1": {"node1"},
        "node1": {"gpu1", "nic1"},
        "nic1": {"optic1"},
    }
    r = evaluate_paths(truth, out)
    # node1 and rack1 contain gpu1 and (via nic1) optic1; both faults hit, so all three predictions do
    assert (r.prediction_hits, r.overall.predicted) == (3, 2)
    assert r.interval_s == 20.0 and r.overall.ttd_p50_ticks == 3.0
    assert evaluate_paths(truth, out, interval_s=60.0).overall.ttd_p50_ticks == 1.0


def test_without_topology_only_the_root_itself_is_predicted(tmp_path: Path) -> None:
    truth, out = run_folder(tmp_path, topology=False)
    r = evaluate_paths(truth, out)
    assert (r.prediction_hits, r.overall.predicted) == (1, 1)
    (out / "predictions.jsonl").unlink()
    assert evaluate_paths(truth, out).predictions == 0


def test_evaluate_paths_names_the_bad_line(tmp_path: Path) -> None:
    truth, out = run_folder(tmp_path, topology=False)
    (out / "incidents.jsonl").write_text(json.dumps(incident()) + "\n\n{not json\n")
    with pytest.raises(EvaluationError, match=r"incidents\.jsonl:3: not JSON"):
        evaluate_paths(truth, out)
    (out / "incidents.jsonl").write_text("[1, 2]\n")
    with pytest.raises(EvaluationError, match=r"incidents\.jsonl:1: expected a JSON object"):
        evaluate_paths(truth, out)
    (out / "incidents.jsonl").unlink()
    with pytest.raises(EvaluationError, match=r"incidents\.jsonl"):
        evaluate_paths(truth, out)
    with pytest.raises(EvaluationError, match="root_cause"):
        evaluate_run([fault()], [{"incident_id": "i1", "opened": 1.0}], [])


def test_to_json_is_strict_json_and_table_names_every_kind() -> None:
    truth = [fault("f1", "gpu_thermal"), fault("f2", "leaf_down", "leaf3", precursor=None, affected=("leaf3",))]
    truth.append(fault("f3", "gpu_hbm_ecc", "gpu9", precursor=0.0, affected=("gpu9",)))
    r = evaluate_run(truth, [incident()], [], interval_s=10.0)
    doc = r.to_json()
    json.dumps(doc, allow_nan=False)
    assert doc["kinds"]["leaf_down"]["ttd_p50_s"] is None and doc["overall"]["faults"] == 3
    table = r.format_table()
    for name in ("gpu_thermal", "leaf_down", "gpu_hbm_ecc", "all", "prediction precision"):
        assert name in table
    assert "ticks" in table


def test_several_runs_pool_into_one_evaluation_without_crossing(tmp_path: Path) -> None:
    pairs = []
    for k, opened in enumerate([ONSET + 30, ONSET + 900]):  # the second run detects too late
        data, out = tmp_path / f"data{k}", tmp_path / f"out{k}"
        data.mkdir()
        out.mkdir()
        write_jsonl(data / "truth.jsonl", [fault("f1")])  # same ids, same times, same entities
        write_jsonl(out / "incidents.jsonl", [incident("i1", opened=opened)])
        (out / "run.json").write_text(json.dumps({"interval_s": 30.0}))
        pairs.append((data / "truth.jsonl", out))
    pooled = evaluate_many(pairs)
    assert (pooled.overall.faults, pooled.overall.detected) == (2, 1)  # run 1's incident saves no one in run 2
    assert pooled.overall.incidents == 2 and pooled.overall.true_incidents == 2  # late, but while it lasted
    assert pooled.interval_s == 30.0 and pooled.overall.ttd_p50_ticks == 1.0


def test_the_lead_a_prediction_needs_to_count_is_the_callers_pooled_or_not(tmp_path: Path) -> None:
    """Issue 46 counts a prediction from 10 minutes of lead (time to drain at a checkpoint); the
    default stays 30 (a checkpoint surely comes first). A 15-minute lead counts at 10, not at 30,
    in one run and pooled alike."""
    pairs = []
    for k in range(2):
        data, out = tmp_path / f"data{k}", tmp_path / f"out{k}"
        data.mkdir()
        out.mkdir()
        write_jsonl(data / "truth.jsonl", [fault("f1", root="gpu1", precursor=0.0)])
        write_jsonl(out / "incidents.jsonl", [])
        write_jsonl(out / "predictions.jsonl", [prediction("gpu1", ONSET - 0.25 * HOUR)])
        (out / "run.json").write_text(json.dumps({"interval_s": 30.0, "predictions_from": ONSET - 3 * HOUR}))
        pairs.append((data / "truth.jsonl", out))
    assert evaluate_paths(*pairs[0]).overall.predicted == 0
    assert evaluate_paths(*pairs[0], min_lead_s=600).overall.predicted == 1
    assert evaluate_many(pairs).overall.predicted == 0
    ten = evaluate_many(pairs, min_lead_s=600)
    assert (ten.overall.predictable, ten.overall.predicted, ten.min_lead_s) == (2, 2, 600)
