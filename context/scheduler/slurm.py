"""Slurm's JSON, as slurmrestd and the CLI (`squeue --json`, `sinfo --json`, `scontrol show
reservation --json`, `sacct --json`) write it, for every data_parser version from v0.0.37 to
v0.0.44, read into a `Snapshot`.

What changes between versions (seen in the recorded bodies in shared/datasets/real-formats/slurm):
- the version itself: `meta.plugin.type` = "openapi/v0.0.38" up to v0.0.39, then
  `meta.plugin.data_parser` = "data_parser/v0.0.40" (with `type` "openapi/slurmctld");
- times: epoch integers up to v0.0.39, `{"set", "infinite", "number"}` objects from v0.0.40 (an
  unset or infinite time is no time);
- `job_state`: a string ("RUNNING") up to v0.0.39, a list (["RUNNING"]) after; node `state` a
  lower-case string plus `state_flags` (["DRAIN"]) up to v0.0.39, a list (["IDLE", "DRAIN"]) after;
- `job_resources`: `allocated_nodes` (a dict keyed by index in v0.0.37, a list of `nodename` after)
  up to v0.0.40, then `nodes.allocation[].name` from v0.0.41;
- accounting (slurmdbd) jobs: `state.current` and `time.start/end`, no GPU indices.

GPU indices come from `gres_detail`, one entry per allocated node in the job's node order, e.g.
`gpu:h100:2(IDX:0-1),gpu:h200:4(IDX:2-5)`; a node's `gres_used` says the same per node.

Every name is checked by the id grammar (`vocab.ids`: node names by `node_refusal`, job ids by
`job_refusal`) and every count bounded (`vocab.bounds`: the body's size and JSON depth, hosts
per host list and all the host lists of one body together, GPU indices per node) before anything
is built; a refusal is a SlurmFormatError naming the JSON path (`jobs[3].nodes`) and the rule.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from context.hostlist import count as hosts_named
from context.hostlist import expand
from context.scheduler.snapshot import JobSeen, NodeSeen, ReservationSeen, Snapshot
from vocab.bounds import MAX_GPU_INDEX, MAX_HOSTS, MAX_HOSTS_PER_DOCUMENT, MAX_SLURM_BYTES, BoundError
from vocab.bounds import loads as bounded_loads
from vocab.ids import job_refusal, node_refusal, shown

# the data_parser versions this reader knows (Slurm 21.08 through 25.11); the CLI of 21.08 writes
# v0.0.37, Debian 12's Slurm 22.05 v0.0.38
KNOWN_VERSIONS = ("v0.0.37", "v0.0.38", "v0.0.39", "v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44")
# the states in which a job holds its GPUs and runs on them
RUNNING = {"RUNNING", "SUSPENDED"}
# the states of a job that has ended, with what `job_end` calls it
ENDED = {
    "COMPLETED": "completed",
    "COMPLETING": "completed",
    "FAILED": "failed",
    "CANCELLED": "cancelled",
    "TIMEOUT": "timeout",
    "NODE_FAIL": "node_fail",
    "PREEMPTED": "preempted",
    "OUT_OF_MEMORY": "out_of_memory",
    "BOOT_FAIL": "boot_fail",
    "DEADLINE": "deadline",
}
# node states and flags that take a node out of service by someone's decision, and those that
# mean the scheduler lost it (Slurm's node state names, `scontrol show node`)
DRAIN_FLAGS = {"DRAIN", "DRAINED", "DRAINING", "MAINT", "REBOOT_REQUESTED", "REBOOT_ISSUED", "PLANNED_DOWN"}
DOWN_STATES = {"DOWN", "FAIL", "FAILING", "NOT_RESPONDING", "UNKNOWN", "ERROR", "FUTURE"}
GRES_ITEM = re.compile(r"(?P<spec>[^,(]+)(?:\((?P<extra>[^)]*)\))?")


class SlurmFormatError(ValueError):
    """The body is not Slurm JSON this reader can use: an error body, an unknown data_parser
    version, truncated JSON, a field of the wrong shape. The message says which."""


def loads(raw: bytes | str, where: str = "the body") -> dict[str, Any]:
    """A slurmrestd or CLI body as a dict, or a SlurmFormatError that says what it is instead."""
    if len(raw) > MAX_SLURM_BYTES:
        raise SlurmFormatError(
            f"{where} is {len(raw):,} bytes, over the {MAX_SLURM_BYTES >> 20} MB a Slurm body may be [bound file_size]"
        )
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    try:
        doc = bounded_loads(text, where)
    except BoundError as exc:
        raise SlurmFormatError(str(exc)) from None
    except json.JSONDecodeError as exc:
        if not text.strip():
            raise SlurmFormatError(f"{where} is empty") from None
        if not text.lstrip().startswith(("{", "[")):
            # slurmrestd answers some refusals in plain text ("Authentication does not apply to
            # request" for a missing or malformed token, "Unable to find requested URL endpoint")
            raise SlurmFormatError(f"{where} is not JSON: {text.strip()[:200]!r}") from None
        raise SlurmFormatError(f"{where} is truncated or malformed JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise SlurmFormatError(f"{where} is a JSON {type(doc).__name__}, not a Slurm response object")
    return doc


def version_of(doc: Mapping[str, Any]) -> str:
    """The data_parser version that wrote the body ("v0.0.40"), refusing one this reader does not know."""
    meta = doc.get("meta")
    plugin = meta.get("plugin", {}) if isinstance(meta, dict) else {}
    named = [str(plugin.get("data_parser") or ""), str(plugin.get("type") or "")] if isinstance(plugin, dict) else []
    for text in named:
        m = re.search(r"v\d+\.\d+\.\d+", text)
        if m:
            if m.group(0) not in KNOWN_VERSIONS:
                raise SlurmFormatError(
                    f"Slurm data_parser {m.group(0)} ({text}) is not a version this reader knows "
                    f"({KNOWN_VERSIONS[0]} to {KNOWN_VERSIONS[-1]})"
                )
            return m.group(0)
    raise SlurmFormatError("the body names no data_parser version (meta.plugin.data_parser or meta.plugin.type)")


def _errors(doc: Mapping[str, Any]) -> str | None:
    errors = doc.get("errors") or []
    if not isinstance(errors, list):
        return None
    texts = []
    for e in errors:
        if isinstance(e, dict):
            texts.append(
                "; ".join(str(e[k]) for k in ("error", "description") if e.get(k)) + f" (error {e.get('error_number')})"
            )
        else:
            texts.append(str(e))
    return " | ".join(texts) if texts else None


def epoch(value: object) -> float | None:
    """A Slurm time: an epoch integer (0 is none) or, from v0.0.40, {set, infinite, number}."""
    if isinstance(value, dict):
        if not value.get("set") or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def _number(value: object) -> int | None:
    if isinstance(value, dict):
        if not value.get("set") or value.get("infinite"):
            return None
        value = value.get("number")
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def states(value: object) -> list[str]:
    """A job or node state as a list of upper-case names ("RUNNING" then ["RUNNING"])."""
    if isinstance(value, str):
        return [value.upper()] if value else []
    if isinstance(value, list):
        return [str(v).upper().strip() for v in value if v]
    return []


def gres_gpus(text: str) -> tuple[int, list[int] | None]:
    """GPUs in a GRES string: `gpu:h100:2(IDX:0-1),gpu:h200:4(IDX:2-5)` -> (6, [0, 1, 2, 3, 4, 5]);
    `gpu:1` (no indices) -> (1, None); `gpu:h100:0(IDX:N/A)` -> (0, [])."""
    count = 0
    indices: list[int] | None = []
    for m in GRES_ITEM.finditer(text or ""):
        spec, extra = m.group("spec").strip().strip(","), m.group("extra")
        parts = spec.split(":")
        if parts[0] != "gpu":
            continue
        n = int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
        count += n
        found = re.search(r"IDX:([^)]*)", extra or "")
        if found is None:
            if n:
                indices = None
            continue
        if indices is not None:
            indices += _index_list(found.group(1))
    return count, (sorted(set(indices)) if indices is not None else None)


def _index_list(text: str) -> list[int]:
    """`0-1,3` -> [0, 1, 3]; `N/A` or empty -> []. An index past a node's GPUs is refused before
    a range is built (`IDX:0-999999999` would be a billion)."""
    out: list[int] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item or item == "N/A":
            continue
        lo, _, hi = item.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise SlurmFormatError(f"GPU index list {text[:80]!r} is malformed")
        if int(hi or lo) > MAX_GPU_INDEX:
            raise SlurmFormatError(
                f"GPU index list {text[:80]!r} names index {int(hi or lo):,}, over {MAX_GPU_INDEX} "
                f"(a node has at most {MAX_GPU_INDEX + 1} GPUs) [bound gpu_index]"
            )
        out += range(int(lo), int(hi or lo) + 1)
    return out


class _HostBudget:
    """The node names one body may still name, shared by every host list in it: each list is
    charged its count before it is expanded, so 2,000 jobs of `n[00000-99999]` (each within the
    per-list bound) are refused at the eleventh, not after 200 million names."""

    def __init__(self) -> None:
        self.limit = MAX_HOSTS_PER_DOCUMENT  # read when the body is, so a test may set it smaller
        self.spent = 0

    def charge(self, n: int, what: str) -> None:
        if self.spent + n > self.limit:
            raise SlurmFormatError(
                f"{what}: {n:,} more nodes would make {self.spent + n:,} in this body, over the {self.limit:,} "
                "one body's host lists may name together (125,000 nodes of 8 GPUs, each in up to 8 jobs) "
                "[bound hosts_per_document]"
            )
        self.spent += n


def _checked_nodes(names: list[str], what: str, budget: _HostBudget | None) -> list[str]:
    """Names by the grammar, charged to the body's budget (None: charged already, as counted)."""
    if len(names) > MAX_HOSTS:
        raise SlurmFormatError(f"{what}: {len(names):,} nodes, over {MAX_HOSTS:,} [bound hosts]")
    if budget is not None:
        budget.charge(len(names), what)
    for name in names:
        if (problem := node_refusal(name)) is not None:
            raise SlurmFormatError(f"{what}: node {shown(name)} refused: {problem}")
    return names


def _hosts(text: object, what: str, budget: _HostBudget) -> list[str]:
    """A host list (or a list of names) as node names, each by the grammar; counted, and charged
    to the body's budget, before it is expanded."""
    if not text:
        return []
    if isinstance(text, list):
        if len(text) > MAX_HOSTS:
            raise SlurmFormatError(f"{what}: {len(text):,} nodes, over {MAX_HOSTS:,} [bound hosts]")
        return _checked_nodes([str(t) for t in text], what, budget)
    try:
        named = hosts_named(str(text))
        if named <= MAX_HOSTS:  # over it, `expand` refuses it by the per-list bound, naming that
            budget.charge(named, what)
        return _checked_nodes(expand(str(text)), what, None)
    except ValueError as exc:
        if isinstance(exc, SlurmFormatError):
            raise
        raise SlurmFormatError(f"{what}: {exc}") from None


def _allocated_nodes(job: Mapping[str, Any], budget: _HostBudget) -> list[str]:
    """The job's nodes in allocation order (the order of `gres_detail`)."""
    res = job.get("job_resources")
    if isinstance(res, dict):
        nodes = res.get("nodes")
        if isinstance(nodes, dict):  # v0.0.41 on
            allocation = nodes.get("allocation")
            if isinstance(allocation, list) and allocation:
                named = [str(a["name"]) for a in allocation[: MAX_HOSTS + 1] if isinstance(a, dict) and "name" in a]
                return _checked_nodes(named, "job_resources.nodes.allocation", budget)
            return _hosts(nodes.get("list"), "job_resources.nodes.list", budget)
        allocated = res.get("allocated_nodes")
        if (
            isinstance(allocated, list)
            and allocated
            and all(isinstance(a, dict) and "nodename" in a for a in allocated)
        ):
            return _checked_nodes([str(a["nodename"]) for a in allocated], "job_resources.allocated_nodes", budget)
        if nodes:
            return _hosts(nodes, "job_resources.nodes", budget)
    return _hosts(job.get("nodes"), "nodes", budget)


def _tres_gpus(tres: object) -> int | None:
    """GPUs from a TRES string (`cpu=2,mem=1G,node=2,gres/gpu=8`) or an accounting TRES list."""
    if isinstance(tres, str):
        m = re.search(r"(?:^|,)gres/gpu=(\d+)", tres)
        return int(m.group(1)) if m else None
    if isinstance(tres, list):
        total = [
            int(t.get("count", 0))
            for t in tres
            if isinstance(t, dict) and t.get("type") == "gres" and t.get("name") == "gpu"
        ]
        return sum(total) if total else None
    return None


def _job(job: Mapping[str, Any], now: float, budget: _HostBudget) -> JobSeen | None:
    """One controller (slurmctld) job as the scheduler holds it, or None for one that never ran."""
    job_id = _job_id(job)
    names = states(job.get("job_state"))
    start = epoch(job.get("start_time"))
    running = bool(RUNNING & set(names))
    ended = next((ENDED[s] for s in names if s in ENDED), None)
    if start is None or not (running or ended) or start > now:
        return None  # pending, or a start still in the future (Slurm's expected start)
    nodes = _allocated_nodes(job, budget)
    if not nodes:
        return None
    gpus_by_node, total = _gpus_by_node(job, nodes)
    end = expected = None
    if ended and not running:
        end = epoch(job.get("end_time")) or now
    else:  # while it runs, Slurm's end_time is when its time limit runs out
        limit = epoch(job.get("end_time"))
        expected = limit if limit is not None and limit > start else None
    return JobSeen(str(job_id), tuple(nodes), total, gpus_by_node, start, end, ended or "", expected)


def _gpus_by_node(job: Mapping[str, Any], nodes: list[str]) -> tuple[dict[str, tuple[int, ...]] | None, int]:
    detail = job.get("gres_detail")
    if isinstance(detail, list) and detail:
        if len(detail) != len(nodes):
            raise SlurmFormatError(f"gres_detail has {len(detail)} entries for {len(nodes)} nodes")
        by_node: dict[str, tuple[int, ...]] | None = {}
        total = 0
        for k, (node, text) in enumerate(zip(nodes, detail, strict=True)):
            try:
                count, indices = gres_gpus(str(text))
            except SlurmFormatError as exc:
                raise SlurmFormatError(f"gres_detail[{k}]: {exc}") from None
            total += count
            if indices is None:
                by_node = None
            elif by_node is not None and indices:
                by_node[node] = tuple(indices)
        return by_node, total
    # no per-node detail: the count from the allocated TRES; none at all is a job without GPUs
    # (it holds none, so it is nobody's cohort), some is a job known by its nodes alone
    from_tres = _tres_gpus(job.get("tres_alloc_str"))
    if from_tres is not None:
        count = from_tres
    else:
        per_node = re.search(r"gpu(?::[^:,=]+)?[:=](\d+)", str(job.get("tres_per_node") or ""))
        count = int(per_node.group(1)) * len(nodes) if per_node else 0
    holds_none: dict[str, tuple[int, ...]] = {}
    return (None if count else holds_none), count


def _db_job(job: Mapping[str, Any], now: float, budget: _HostBudget) -> JobSeen | None:
    """One accounting (slurmdbd, `sacct --json`) job: nodes and GPU counts, never indices."""
    state = job.get("state")
    names = states(state.get("current") if isinstance(state, dict) else state)
    times = job.get("time") if isinstance(job.get("time"), dict) else {}
    start = epoch(times.get("start"))  # type: ignore[union-attr]
    running = bool(RUNNING & set(names))
    ended = next((ENDED[s] for s in names if s in ENDED), None)
    if start is None or not (running or ended) or start > now:
        return None
    if job.get("nodes") in ("None assigned", ["None assigned"]):
        return None  # sacct's word for a job that never had nodes
    nodes = _hosts(job.get("nodes"), "nodes", budget)
    if not nodes:
        return None
    tres = job.get("tres")
    gpus = _tres_gpus(tres.get("allocated") if isinstance(tres, dict) else None) or 0
    end = (epoch(times.get("end")) or now) if ended and not running else None  # type: ignore[union-attr]
    # accounting keeps the time limit itself, in minutes ({set, infinite, number}; unlimited: none)
    limit = _number(times.get("limit")) if running else None  # type: ignore[union-attr]
    expected = start + 60.0 * limit if limit is not None and limit > 0 else None
    return JobSeen(_job_id(job), tuple(nodes), gpus, None, start, end, ended or "", expected)


def _job_id(job: Mapping[str, Any]) -> str:
    job_id = job.get("job_id")
    if not isinstance(job_id, int | str) or isinstance(job_id, bool):
        raise SlurmFormatError(f"job_id: a job without a job_id: {str(job)[:120]}")
    if (problem := job_refusal(str(job_id))) is not None:
        raise SlurmFormatError(f"job_id: {shown(str(job_id))} refused: {problem}")
    return str(job_id)


def _node(node: Mapping[str, Any]) -> NodeSeen:
    name = node.get("name") or node.get("hostname")
    if not isinstance(name, str) or not name:
        raise SlurmFormatError(f"a node without a name: {str(node)[:120]}")
    if (problem := node_refusal(name)) is not None:
        raise SlurmFormatError(f"name: node {shown(name)} refused: {problem}")
    names = set(states(node.get("state"))) | set(states(node.get("state_flags")))
    # a DRAIN flag on a DOWN node: the node is lost, whatever else was planned for it
    down = bool(names & DOWN_STATES)
    drained = bool(names & DRAIN_FLAGS)
    since = epoch(node.get("reason_changed_at"))
    return NodeSeen(name, drained, down, str(node.get("reason") or ""), since)


def _reservation(r: Mapping[str, Any], budget: _HostBudget) -> ReservationSeen | None:
    name = r.get("name")
    start, end = epoch(r.get("start_time")), epoch(r.get("end_time"))
    if not isinstance(name, str) or start is None or end is None:
        return None
    flags = set(states(r.get("flags")))
    nodes = _hosts(r.get("node_list"), "node_list", budget)
    return ReservationSeen(name, tuple(nodes), start, end, "MAINT" in flags or "MAINTENANCE" in flags)


def parse_slurm(doc: Mapping[str, Any], now: float) -> Snapshot:
    """One slurmrestd or CLI body (jobs, nodes or reservations; which, from its keys), read at
    `now` (epoch seconds). An error body, an unknown version or a malformed field is a
    SlurmFormatError naming it."""
    version = version_of(doc)
    problem = _errors(doc)
    if problem is not None:
        raise SlurmFormatError(f"slurmrestd ({version}) answered with an error: {problem}")
    snap = Snapshot(now)
    budget = _HostBudget()
    place = ""
    try:
        if "jobs" in doc:
            snap.parts.add("jobs")
            for i, raw in enumerate(_list(doc, "jobs")):
                place = f"jobs[{i}]"
                db = "state" in raw and "job_state" not in raw
                job = _db_job(raw, now, budget) if db else _job(raw, now, budget)
                if job is not None:
                    snap.jobs[job.job] = job
        if "nodes" in doc:
            snap.parts.add("nodes")
            for i, raw in enumerate(_list(doc, "nodes")):
                place = f"nodes[{i}]"
                node = _node(raw)
                snap.nodes[node.node] = node
        if "reservations" in doc:
            snap.parts.add("reservations")
            for i, raw in enumerate(_list(doc, "reservations")):
                place = f"reservations[{i}]"
                resv = _reservation(raw, budget)
                if resv is not None:
                    snap.reservations[resv.name] = resv
    except SlurmFormatError as exc:  # the JSON path of the object at fault, then its field's
        raise SlurmFormatError(f"{place}.{exc}" if place else str(exc)) from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise SlurmFormatError(
            f"Slurm {version} body has a field of an unexpected shape at {place or 'the top'}: {exc!r}"[:400]
        ) from None
    if not snap.parts:
        raise SlurmFormatError(f"Slurm {version} body holds no jobs, nodes or reservations (keys: {sorted(doc)})")
    return snap


def _list(doc: Mapping[str, Any], key: str) -> Iterable[Mapping[str, Any]]:
    items = doc[key]
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise SlurmFormatError(f"{key} is not a list of objects")
    return items


def node_gpus_in_use(node: Mapping[str, Any]) -> tuple[int, list[int] | None]:
    """A node's GPUs in use from its `gres_used` (`gpu:h100:1(IDX:0),gpu:h200:0(IDX:N/A)`)."""
    return gres_gpus(str(node.get("gres_used") or ""))


__all__ = ["KNOWN_VERSIONS", "SlurmFormatError", "epoch", "gres_gpus", "loads", "parse_slurm", "version_of"]
