"""The topology changes under a running root-cause daemon (a node added, a node removed, the file
re-imported in place): no restart, the engine walks the new graph, detectors keep what they
learnt, the incidents of the faults the change does not touch are those of the offline run, and
one notice says what changed. A bad file is refused and the old topology stays."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from aiops.cli import main
from benchmarks.soak import by_incident, incident_differences
from ingest.kafka import ensure_topics
from tests.faults.daemons import Replay, jsonl, reaped
from tests.faults.test_broker_restart import topic_env
from tests.integration.test_run_kafka import _consume
from vocab.settings import KafkaSettings

# two pods, and faults that stay on their nodes (a leaf going down would touch half the cluster)
GEN = ["--gpus", "512", "--hours", "1", "--interval", "30", "--seed", "12"]
FAULTS = ["--faults", "psu_failure=1,gpu_straggler=1,nic_link_flap=1"]

pytestmark = [pytest.mark.services, pytest.mark.slow]


def _untouched_node(topology: dict[str, Any], *texts: str) -> str:
    """A node that no fault and no incident of the reference names, nor the leaves it is cabled
    to (a leaf's candidacy weighs what hangs off it)."""
    named = "\n".join(texts)
    leaves: dict[str, set[str]] = {}
    for n in topology["nodes"]:
        if n["kind"] == "port" and "-nic" in str(n.get("peer", "")):
            leaves.setdefault(str(n["peer"]).split("-nic")[0], set()).add(str(n["switch"]))
    for n in topology["nodes"]:
        node = str(n["id"])
        if n["kind"] != "node" or f'"{node}' in named or f"{node}-" in named:
            continue
        if not any(f'"{leaf}"' in named for leaf in leaves.get(node, ())):
            return node
    raise AssertionError("every node is named by some fault")


def _without(topology: dict[str, Any], node: str) -> dict[str, Any]:
    def mine(entity: str) -> bool:
        return entity == node or entity.startswith(f"{node}-") or entity.startswith(f"link-{node}-")

    ports = {n["id"] for n in topology["nodes"] if n["kind"] == "port" and mine(str(n.get("peer", "")))}
    keep = [n for n in topology["nodes"] if not mine(n["id"]) and n["id"] not in ports]
    ids = {n["id"] for n in keep}
    links = [e for e in topology["links"] if e["source"] in ids and e["target"] in ids]
    return {**topology, "nodes": keep, "links": links}


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)  # as an importer's --out lands: whole, at once


def test_a_changed_topology_is_taken_without_a_restart(kafka_settings: KafkaSettings, tmp_path: Path) -> None:
    k = kafka_settings
    recorded, offline = tmp_path / "recorded", tmp_path / "offline"
    assert main(["gen", *GEN, *FAULTS, "--out", str(recorded)]) == 0
    assert main(["run", "--input", str(recorded), "--out", str(offline), "--no-predict"]) == 0
    assert by_incident(jsonl(offline / "incidents.jsonl"))
    ensure_topics(k.bootstrap, [k.telemetry_topic], partitions=3)
    r = Replay(k, recorded, offline, {**os.environ, **topic_env(k), "AIOPS_CHECKPOINT_EVERY_S": "2"})
    original = json.loads((r.recorded / "topology.json").read_text())
    live = tmp_path / "live-topology.json"
    _write(live, original)
    removed = _untouched_node(
        original, (r.recorded / "truth.jsonl").read_text(), (r.offline / "incidents.jsonl").read_text()
    )
    changed = _without(original, removed)
    rack = next(n["id"] for n in original["nodes"] if n["kind"] == "rack")
    changed["nodes"].append({"id": "n99999", "kind": "node", "rack": rack})
    changed["links"].append({"source": rack, "target": "n99999", "relation": "contains"})
    daemon = [a if a != str(r.recorded / "topology.json") else str(live) for a in r.daemon]
    with reaped() as track:
        gen = track(r.aiops("gen", *GEN, *FAULTS, "--kafka", k.bootstrap, "--speed", "50"))
        run = track(r.aiops(*daemon, "--stop-when-idle", "15"))
        r.wait_for_first_incident()
        assert gen.poll() is None, "the stream ended before the change: nothing to show"
        bad = {**changed, "links": [*changed["links"], {"source": "nowhere", "target": rack, "relation": "contains"}]}
        _write(live, bad)  # refused: the old topology stays
        time.sleep(3)
        _write(live, changed)
        _, err = run.communicate(timeout=600)
        gen.communicate(timeout=60)
    assert run.returncode == 0, err[-3000:]
    assert "not reloaded" in err and "names unknown entity 'nowhere'" in err
    notices = [n for n in _consume(k, k.notices_topic) if n["kind"] == "topology"]
    assert len(notices) == 1, notices
    assert notices[0]["detail"]["added"] == ["n99999"]
    assert removed in notices[0]["detail"]["removed"] and f"{removed}-gpu0" in notices[0]["detail"]["removed"]
    expected = by_incident(jsonl(r.offline / "incidents.jsonl"))
    assert incident_differences(by_incident(_consume(k, k.incidents_topic)), expected) == []
