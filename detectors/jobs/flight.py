"""The culprit of a hang from the ranks' PyTorch NCCL flight-recorder dumps.

Per process group, each rank's last collective (FlightDump.last_collectives) and its state. The
stuck collective is the highest collective_seq_id any rank reached; a rank whose last collective is
lower never entered it (its entry is missing: the flight recorder tutorial's example, where rank 1
never joined collective 3 and rank 0's entry stays `scheduled`). Where every rank has the entry, a
rank still `scheduled` while another is `started` never launched it (its GPU or stream is stuck
behind earlier work). A group whose ranks all completed the same collective is not stuck.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ingest.jobs.records import FlightDump


@dataclass(frozen=True, slots=True)
class Position:
    """Where one rank stopped in one process group."""

    seq: int  # collective_seq_id of its last collective
    state: str  # scheduled | started | completed


@dataclass(frozen=True, slots=True)
class FlightVerdict:
    pg_name: str
    pg_desc: str
    stuck_seq: int
    culprits: tuple[tuple[int, str], ...]  # (global rank, why)
    positions: dict[int, Position]  # by global rank
    no_dump: tuple[int, ...]  # the group's ranks (pg_config) with no dump


def positions_of(dump: FlightDump) -> dict[str, tuple[str, Position]]:
    """A dump's last collective per process group name: (the group's description, where it stopped)."""
    return {
        entry.pg_name: (entry.pg_desc, Position(entry.collective_seq_id, entry.state))
        for entry in dump.last_collectives().values()
    }


def judge_group(
    pg_name: str, pg_desc: str, positions: dict[int, Position], members: Iterable[int]
) -> FlightVerdict | None:
    """The verdict on one group from its ranks' positions; None where the group is not stuck."""
    if not positions:
        return None
    stuck = max(p.seq for p in positions.values())
    if all(p.seq == stuck and p.state == "completed" for p in positions.values()):
        return None
    culprits = [(rank, f"last collective {p.seq}, none for {stuck}") for rank, p in positions.items() if p.seq < stuck]
    at_stuck = {rank: p.state for rank, p in positions.items() if p.seq == stuck}
    if not culprits and "started" in at_stuck.values():
        culprits = [
            (rank, f"collective {stuck} scheduled, never started") for rank, s in at_stuck.items() if s == "scheduled"
        ]
    no_dump = tuple(sorted(set(members) - set(positions)))
    return FlightVerdict(pg_name, pg_desc, stuck, tuple(sorted(culprits)), dict(sorted(positions.items())), no_dump)


def flight_verdicts(dumps: Iterable[FlightDump]) -> list[FlightVerdict]:
    """Every stuck process group of one job's dumps (one dump per rank; a later dump of a rank
    replaces an earlier one in the caller's hands, not here)."""
    by_group: dict[str, dict[int, Position]] = {}
    descs: dict[str, str] = {}
    members: dict[str, set[int]] = {}
    for dump in dumps:
        for name, (desc, ranks) in dump.groups.items():
            members.setdefault(name, set()).update(ranks)
            descs.setdefault(name, desc)
        for name, (desc, position) in positions_of(dump).items():
            by_group.setdefault(name, {})[dump.rank] = position
            descs.setdefault(name, desc)
    verdicts = (
        judge_group(name, descs[name], positions, members.get(name, ())) for name, positions in by_group.items()
    )
    return [v for v in verdicts if v is not None]
