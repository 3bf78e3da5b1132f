"""A poll with one hostile message: the others' values are stored, the bad line is dead-lettered
with its reason and its message's offset, and a quote never reaches into another message.

Also every file of the line-protocol hostile corpus (tests/data/hostile/lineprotocol/) through
the ingest core: each is refused with a reason, and the clean lines around it are kept.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ingest.consume import line_offsets
from ingest.deadletter import Source
from ingest.messages import MAX_MESSAGE_BYTES, process_messages
from ingest.pipeline import IngestCore

CORPUS = Path(__file__).resolve().parents[1] / "data/hostile/lineprotocol"
TOPIC = "aiops.telemetry"


def _message(node: int, now_ns: int) -> bytes:
    return b"".join(
        b"gpu,gpu=n%05d-gpu%d,node=n%05d,job=idle DCGM_FI_DEV_GPU_TEMP=%d,DCGM_FI_DEV_POWER_USAGE=300 %d\n"
        % (node, g, node, 40 + g, now_ns)
        for g in range(8)
    )


def _poll(values: list[bytes]) -> list[tuple[Source, int, bytes]]:
    now_ms = time.time_ns() // 1_000_000
    return [(Source(TOPIC, 0, 100 + i), now_ms, v) for i, v in enumerate(values)]


def test_an_unterminated_string_in_one_message_costs_that_line_only() -> None:
    now = time.time_ns()
    values = [_message(n, now) for n in range(10)]
    bad_line = b'gpu,gpu=n00004-gpu9,node=n00004 note="x,DCGM_FI_DEV_GPU_TEMP=1 %d' % now
    values[4] = values[4] + bad_line  # no final newline either: the message's end still ends it
    core = IngestCore()
    batch = process_messages(core, _poll(values), (TOPIC, 0))
    assert batch.value_count == 10 * 8 * 2  # every other line of every message, the bad one's too
    [letter] = batch.deadletters
    assert letter.line == bad_line and letter.source == Source(TOPIC, 0, 104)
    assert "unterminated string in field 'note'" in letter.reason
    assert "before the end of its message" in letter.reason
    offsets = line_offsets(_poll(values), batch.line_no)["gpu"]
    assert sorted(set(offsets.tolist())) == list(range(100, 110))
    s = core.stats
    assert s.lines == s.values // 2 + s.deadlettered  # every line accounted for


def test_a_quote_left_open_at_a_message_end_is_not_closed_by_the_next_message() -> None:
    now = time.time_ns()
    # Joined, the two messages would make one valid record with a newline in its string.
    first = b'gpu,gpu=n00001-gpu0,node=n00001 note="open'
    second = b'closed" %d\n' % now + _message(2, now)
    batch = process_messages(IngestCore(), _poll([first, second]), (TOPIC, 0))
    assert [(d.line, d.source) for d in batch.deadletters] == [
        (first, Source(TOPIC, 0, 100)),
        (second.split(b"\n")[0], Source(TOPIC, 0, 101)),
    ]
    assert batch.frames["gpu"].tag("node").tolist() == ["n00002"] * 8


def test_a_message_over_the_bound_is_dead_lettered_whole_and_the_rest_of_the_poll_kept() -> None:
    now = time.time_ns()
    huge = _message(1, now) * (MAX_MESSAGE_BYTES // len(_message(1, now)) + 1)
    values = [_message(0, now), huge, _message(2, now)]
    core = IngestCore()
    batch = process_messages(core, _poll(values), (TOPIC, 0))
    [letter] = batch.deadletters
    assert letter.source == Source(TOPIC, 0, 101) and "over the bound of 8,388,608 bytes" in letter.reason
    assert len(letter.line) == 64 * 1024
    assert batch.frames["gpu"].tag("node").tolist() == ["n00000"] * 8 + ["n00002"] * 8
    offsets = line_offsets(_poll(values), batch.line_no)["gpu"]
    assert offsets.tolist() == [100] * 8 + [102] * 8
    assert core.stats.lines == 16 + 1


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.lp")), ids=lambda p: p.name)
def test_every_hostile_line_protocol_file_is_refused_with_a_reason_and_its_neighbours_kept(path: Path) -> None:
    """Each file holds hostile lines only; framed by clean messages of the same poll."""
    now = time.time_ns()
    hostile = path.read_bytes().replace(b"NOW", b"%d" % now)
    batch = process_messages(IngestCore(), _poll([_message(0, now), hostile, _message(2, now)]), (TOPIC, 0))
    assert batch.frames["gpu"].tag("node").tolist() == ["n00000"] * 8 + ["n00002"] * 8
    assert batch.deadletters, path.name
    for letter in batch.deadletters:
        assert letter.source == Source(TOPIC, 0, 101) and letter.reason


def test_a_line_over_the_bound_is_refused_unread_and_the_rest_of_its_message_kept() -> None:
    now = time.time_ns()  # (generated: a corpus file stays small)
    overlong = b"gpu,gpu=n00001-gpu0,node=n00001 note=" + b"x" * (64 * 1024) + b" %d\n" % now
    batch = process_messages(IngestCore(), _poll([overlong + _message(1, now)]), (TOPIC, 0))
    [letter] = batch.deadletters
    assert "over the bound of 65,536 bytes a record may take" in letter.reason
    assert batch.frames["gpu"].tag("node").tolist() == ["n00001"] * 8


def test_a_recorded_file_with_an_endless_line_is_read_in_bounded_pieces_and_the_rest_kept(tmp_path: Path) -> None:
    from detectors.detect_loop import read_chunks

    now = time.time_ns()
    path = tmp_path / "telemetry.lp"
    path.write_bytes(_message(0, now) + b"x" * 3000 + b"\n" + _message(1, now))
    pieces = list(read_chunks(path, size=1000))
    assert max(len(p) for p in pieces) <= 2 * 1000  # before: the run without a newline was held whole
    core = IngestCore()
    batches = [core.process(p) for p in pieces]
    nodes = [n for b in batches if "gpu" in b.frames for n in b.frames["gpu"].tag("node").tolist()]
    assert nodes == ["n00000"] * 8 + ["n00001"] * 8
    assert all(d.reason for b in batches for d in b.deadletters)
