"""The scheduler's events door (issue 44, finding 6): every node an event names passes the node
grammar, every job id the job grammar, GPU counts and indices are bounded; each line of
tests/data/hostile/events/hostile.jsonl becomes a dead letter naming the file, the line and the
rule, never a Schedule entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from detectors.detect_loop import read_events
from vocab.schedule import Schedule, event_problem

HOSTILE = Path(__file__).resolve().parents[2] / "tests" / "data" / "hostile" / "events" / "hostile.jsonl"


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        (1, "nodes[0]: 'n[0000-0015]' refused: a node id with brackets"),
        (2, "job: '-rf' refused"),
        (3, "gpus 50,000,000 is over 64"),
        (4, "gpus_by_node['gpu001'] must be a list of GPU indices 0..63"),
        (5, "nodes[0]: 'gpu001 gpu002' refused"),
        (6, "nodes[0]: '../etc' refused"),
        (7, "job: 'j1\\u202e' refused"),
        (8, "[rule ids.ascii]"),
        (9, "not a JSON event"),  # 10,000 deep: json.loads' RecursionError, caught by the reader
    ],
)
def test_each_hostile_event_is_a_dead_letter_naming_its_line_and_rule(line: int, rule: str) -> None:
    """Before: all but the last were used as events (a node `n[0000-0015]`, a job `-rf`, 50 million
    GPUs, a GPU index of a billion)."""
    events, letters = read_events(HOSTILE)
    assert events == []
    by_line = {letter.reason.split(":", 2)[1]: letter.reason for letter in letters}
    assert len(by_line) == 9
    reason = by_line[str(line)]
    assert reason.startswith("hostile.jsonl:") and rule in reason, reason


def test_an_event_naming_more_nodes_than_a_cluster_has_is_refused_before_a_schedule_is_built() -> None:
    many = {"type": "node_state", "state": "drain", "nodes": [f"n{i}" for i in range(100_001)], "time": 1.0}
    assert "[bound hosts]" in (event_problem(many) or "")
    fine = {"type": "job_start", "job": "7_1", "nodes": ["gpu001"], "gpus": 8, "time": 1.0}
    assert event_problem(fine) is None
    assert Schedule.from_events([fine]).jobs["7_1"].gpus == 8


def test_the_corpus_file_is_small_and_listed() -> None:
    assert HOSTILE.stat().st_size < 50_000
    listed = (HOSTILE.parents[1] / "MANIFEST.tsv").read_text()
    assert "events/hostile.jsonl\tevents\t" in listed
    json.loads(HOSTILE.read_text().splitlines()[0])  # the first line is JSON: its refusal is the grammar's


def test_times_no_clock_holds_are_dead_letters() -> None:
    """A job's expected_end of -1e308 is finite, and was taken (issue 64): every line of the file
    is now a dead letter naming the epoch bound."""
    path = HOSTILE.parent / "times-out-of-range.jsonl"
    events, letters = read_events(path)
    assert events == [] and len(letters) == 5
    assert all("epoch seconds from 0 to" in letter.reason for letter in letters), [x.reason for x in letters]
