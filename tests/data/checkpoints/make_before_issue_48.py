# mypy: ignore-errors
# (it imports the module layout before issue 48, which this tree no longer has: run with the old code)
"""Writes tests/data/checkpoints/before-issue-48/: checkpoints of the whole pipeline and of the
engine fed by detection, taken with the module layout before issue 48 (detectors.runner,
detectors.progress), for the test that a daemon restarts from them after the move."""

import os
import sys
import tempfile
from pathlib import Path

os.environ["AIOPS_STATE_KEY"] = "before-issue-48-test-key-0123456789abcdef"
from aiops.checkpoint import Checkpoint, CheckpointStore
from aiops.runner import Pipeline
from detectors.progress import FindingsLoop

from rca.graph import TopologyGraph
from telemetry_gen.emit import write_folder
from telemetry_gen.generator import GenConfig, Generation

out = Path(sys.argv[1])
work = Path(tempfile.mkdtemp())
gen = Generation(GenConfig(gpus=32, hours=0.25, interval=30, seed=48, faults="psu_failure=1"))
write_folder(gen, work)
lines = (work / "telemetry.lp").read_bytes().splitlines(keepends=True)
pipeline = Pipeline(TopologyGraph.load(work / "topology.json"), 30.0, gen.events())
pipeline.feed(b"".join(lines[: len(lines) // 2]))
CheckpointStore(out, "whole").save(Checkpoint(pipeline.state(), {"aiops.telemetry": {0: 123}}))
findings = FindingsLoop(30.0, 4, "a", "p", "progress")
engine = Pipeline(TopologyGraph.load(work / "topology.json"), 30.0, gen.events(), findings=findings)
CheckpointStore(out, "from-detection").save(Checkpoint(engine.state(), {}))
print(sorted(p.name for p in out.iterdir()), [p.stat().st_size for p in out.iterdir()])
