"""Hostile and broken input from files: each bad piece is dead-lettered with its reason, the run
goes on, and nothing good beside it is lost."""

from __future__ import annotations

import json
from pathlib import Path

from aiops.cli import main
from telemetry_gen.emit import write_folder
from telemetry_gen.generator import GenConfig, Generation
from vocab.schedule import Schedule, event_problem

GOOD = {"type": "maintenance", "nodes": ["n00001"], "start": 1767225600.0, "end": 1767229200.0}
BROKEN_EVENT_LINES = [
    b'{"type": "job_start", "job": "j1", "nodes": ["n00000"], "ti',  # truncated
    b"\xff\xfe\x00binary\x00",  # not UTF-8
    b'["type", "maintenance"]',  # not an object
    json.dumps({"type": "maintenance", "nodes": "n00002", "start": 1, "end": 2}).encode(),  # nodes a string
    json.dumps({"type": "maintenance", "nodes": ["n00002"], "start": "soon", "end": 2}).encode(),
    json.dumps({"type": "maintenance", "nodes": ["n00002"], "start": 5, "end": 2}).encode(),  # ends first
    json.dumps({"type": "job_start", "nodes": ["n00002"], "time": 1}).encode(),  # no job id
    json.dumps({"type": "job_end", "job": "j9", "time": None}).encode(),
    b"[" * 100_000,  # nesting deep enough to break a recursive parser
]


def test_every_broken_event_is_refused_with_a_reason_and_the_schedule_never_raises() -> None:
    assert event_problem(GOOD) is None
    assert event_problem({"type": "news", "anything": [1, 2]}) is None  # other types pass, ignored
    for line in BROKEN_EVENT_LINES[2:8]:  # the ones that are JSON: each names what is wrong
        assert event_problem(json.loads(line)), line
    assert Schedule.from_events([GOOD]).in_maintenance("n00001", GOOD["start"] + 1)  # type: ignore[operator]


def test_a_run_over_a_broken_events_file_dead_letters_the_bad_lines_and_uses_the_good(tmp_path: Path) -> None:
    gen = Generation(GenConfig(realism="clean", gpus=64, hours=0.25, interval=30, seed=3, faults=""))
    write_folder(gen, tmp_path / "in")
    events = tmp_path / "in" / "events.jsonl"
    good_lines = events.read_bytes().splitlines()
    events.write_bytes(b"\n".join([*good_lines, *BROKEN_EVENT_LINES, json.dumps(GOOD).encode()]) + b"\n")
    assert main(["run", "--input", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--no-predict"]) == 0
    letters = [json.loads(x) for x in (tmp_path / "out" / "deadletters.jsonl").read_text().splitlines()]
    refused = [x for x in letters if x["stage"] == "events"]
    assert len(refused) == len(BROKEN_EVENT_LINES)
    assert all(x["reason"].startswith("events.jsonl:") for x in refused)
    assert json.loads((tmp_path / "out" / "run.json").read_text())["bad_events"] == len(BROKEN_EVENT_LINES)
