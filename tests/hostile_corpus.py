"""Runs every file of the hostile-input corpus (tests/data/hostile/, listed in its MANIFEST.tsv)
through the door it attacks, the way the service meets it, and prints one JSON line a file:
{"path", "door", "outcome", "message"}. `tests/unit/test_hostile_corpus.py` runs this module in a
child process under an address-space limit and judges the lines; a traceback, a crash or a
memory blow-up shows there, not here.

outcome is what the door did with the file:
- "refused": the whole input was refused with one line naming the place and the rule;
- "dead-lettered": the hostile pieces became dead letters with their reasons, the rest was kept;
- "findings": the import went on without the hostile pieces and reported each as a finding;
- "inert": the hostile text was shown as data only (pages, chat), never live;
- "let-through": the door took it as if it were good (always a failure).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HOSTILE = Path(__file__).resolve().parent / "data" / "hostile"
Result = tuple[str, str]  # outcome, message


def manifest() -> list[tuple[str, str, str]]:
    """(path, door, what it attacks) for every row of the MANIFEST."""
    rows = []
    for line in (HOSTILE / "MANIFEST.tsv").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            path, door, what = line.split("\t", 2)
            rows.append((path, door, what))
    return rows


def _cli(args: list[str]) -> tuple[int, str]:
    """`aiops ARGS` in this process: its exit status and what it wrote to stderr."""
    from aiops.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(args)
    return code, err.getvalue().strip()


def _one_line(code: int, err: str) -> Result:
    if code == 0:
        return "let-through", err
    return ("refused" if "\n" not in err and err else "unclear"), err


def _lineprotocol(path: Path, work: Path) -> Result:
    from ingest.deadletter import Source
    from ingest.messages import process_messages
    from ingest.pipeline import IngestCore

    now = time.time_ns()
    clean = [b"gpu,gpu=n%05d-gpu0,node=n%05d,job=idle DCGM_FI_DEV_GPU_TEMP=40 %d\n" % (n, n, now) for n in (0, 2)]
    hostile = path.read_bytes().replace(b"NOW", b"%d" % now)
    poll = [
        (Source("aiops.telemetry", 0, 100 + i), now // 1_000_000, v)
        for i, v in enumerate([clean[0], hostile, clean[1]])
    ]
    batch = process_messages(IngestCore(), poll, ("aiops.telemetry", 0))
    kept = batch.frames["gpu"].tag("node").tolist() if "gpu" in batch.frames else []
    if kept != ["n00000", "n00002"]:
        return "let-through", f"neighbours kept: {kept}"
    if not batch.deadletters or not all(d.reason for d in batch.deadletters):
        return "let-through", "no dead letter"
    return "dead-lettered", batch.deadletters[0].reason


def _fabric(work: Path) -> Path:
    """A small clean fabric for an inventory to merge into: gpu001 and gpu002 on leaf01."""
    f = work / "fabric.txt"
    f.write_text(
        "".join(
            f"CA 10{h} 1 0x0c42a1030000000{h} 4x NDR - SW 10 {h} 0x0000000000001000 ( 'gpu00{h} mlx5_0' - 'leaf01' )\n"
            for h in (1, 2)
        )
    )
    return f


def _topology(flag: str) -> Callable[[Path, Path], Result]:
    def run(path: Path, work: Path) -> Result:
        from vocab.ids import entity_refusal, node_refusal

        args = ["topology", "import", flag, str(path), "--out", str(work / "t.json"), "--report", str(work / "r.json")]
        if flag == "--inventory":
            args = ["topology", "import", "--ibnetdiscover", str(_fabric(work)), *args[2:]]
        code, err = _cli(args)
        if code != 0:
            return _one_line(code, err)
        # imported: every id that came out must be one the grammar takes, and the hostile piece a finding
        topology = json.loads((work / "t.json").read_text())
        for node in topology.get("nodes", []):
            kind, ident = node.get("kind"), str(node.get("id"))
            refusal = node_refusal(ident) if kind == "node" else entity_refusal(ident)
            if refusal:
                return "let-through", f"{kind} {ident!r} imported: {refusal}"
        findings = json.loads((work / "r.json").read_text()).get("findings", [])
        hostile = [f for f in findings if f.get("kind") in _HOSTILE_FINDINGS]
        if not hostile:
            return "let-through", "imported with no finding about the hostile part"
        return "findings", "; ".join(sorted({str(f["kind"]) for f in hostile}))

    return run


_HOSTILE_FINDINGS = {
    "invalid_name",
    "duplicate_guid",
    "duplicate_port",
    "duplicate_name",
    "duplicate_device",
    "too_many_hcas",
}


def _scheduler(flag: str) -> Callable[[Path, Path], Result]:
    def run(path: Path, work: Path) -> Result:
        return _one_line(
            *_cli(["scheduler", "import", flag, str(path), "--at", "1767225600", "--out", str(work / "e.jsonl")])
        )

    return run


def _events(path: Path, work: Path) -> Result:
    """The events file (`aiops run --events`) and the events topic (each line one record, as
    `aiops scheduler follow` publishes them): both doors refuse every line, with its reason."""
    from aiops.events_feed import decode_events
    from detectors.detect_loop import read_events

    lines = [x for x in path.read_bytes().splitlines() if x.strip()]
    events, letters = read_events(path)
    if events or len(letters) != len(lines):
        return "let-through", f"{len(events)} of {len(lines)} hostile events taken from the file"
    if not all(d.reason.startswith(f"{path.name}:") for d in letters):
        return "unclear", "a dead letter without its line"
    taken, refused = decode_events([(0, offset, raw) for offset, raw in enumerate(lines)], "aiops.events")
    if taken or len(refused) != len(lines):
        return "let-through", f"{len(taken)} of {len(lines)} hostile events taken from the topic"
    if not all(d.reason and d.source is not None and d.source.offset == i for i, d in enumerate(refused)):
        return "unclear", "a topic's dead letter without its reason or offset"
    return "dead-lettered", letters[0].reason


def _checkpoint(path: Path, work: Path) -> Result:
    """The payload as a checkpoint file signed with the daemon's own key (the attacker who can
    write the state directory and read its key): the exact list of classes alone must hold."""
    from aiops import daemon_state as ck

    state = work / "state"
    state.mkdir()
    key = ck.state_key(state, create=True)
    inner = HOSTILE / "checkpoint" / "numpy-load-inner.pickle"  # what numpy-load-allow-pickle opens
    (work / "numpy-load-inner.pickle").write_bytes(inner.read_bytes())
    header = b'{"offsets": {}, "outputs": {}, "written_at": 0}'
    body = path.read_bytes()
    (state / "daemon.ckpt").write_bytes(ck.MAGIC + header + b"\n" + ck._signature(key, header, body) + b"\n" + body)
    cwd = os.getcwd()
    os.chdir(work)  # each payload's command makes a marker in the working directory
    try:
        ck.CheckpointStore(state, "daemon").load()
        outcome, message = "let-through", "loaded"
    except ck.CheckpointError as exc:
        outcome, message = "refused", str(exc)
    finally:
        os.chdir(cwd)
    ran = [p.name for p in work.iterdir() if p.name.startswith("pwned")]
    return ("let-through", f"ran code: {ran}") if ran else (outcome, message)


class _Producer:
    """Kafka's place for the remote-write door: what would have been published."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []
        self.failed = 0

    def send_raw(self, topic: str, value: bytes, key: bytes | None = None, partition: int | None = None) -> None:
        self.sent.append((topic, value))

    def flush(self, timeout_s: float = 60.0, should_stop: object = None) -> None:
        pass

    def close(self) -> None:
        pass


_RW_TOKEN = "hostile-corpus-token"


def _remote_write(mode: str) -> Callable[[Path, Path], Result]:
    """The Prometheus door (`aiops ingest --remote-write`) on loopback with a token and short
    timeouts, Kafka replaced by a list. mode "token": the body POSTed with the token; "no-token":
    without it; "raw": the file is an HTTP request sent as it is (TOKEN replaced) by 30
    connections at once that then stall."""

    def run(path: Path, work: Path) -> Result:
        import http.client
        import socket
        import threading

        from pydantic import SecretStr

        from ingest.remote_write_service import Credentials, RemoteWriteReceiver
        from vocab.settings import KafkaSettings

        producer = _Producer()
        receiver = RemoteWriteReceiver(
            KafkaSettings(),
            "127.0.0.1",
            0,
            producer=producer,  # type: ignore[arg-type]
            credentials=Credentials(SecretStr(_RW_TOKEN)),
            read_timeout_s=1.0,
            idle_timeout_s=1.0,
            body_wait_s=0.5,
        )
        stop = threading.Event()
        server = threading.Thread(target=receiver.serve, args=(stop.is_set,), daemon=True)
        server.start()
        name = path.name
        try:
            if mode == "raw":
                raw = path.read_bytes().replace(b"TOKEN", _RW_TOKEN.encode())
                socks = [socket.create_connection(("127.0.0.1", receiver.port), timeout=10) for _ in range(30)]
                for s in socks:
                    s.sendall(raw)
                answers = [s.recv(200).split(b"\r\n", 1)[0].decode(errors="replace") for s in socks]
                for s in socks:
                    s.close()
                if any(" 408 " not in a + " " and " 503 " not in a + " " for a in answers) or producer.sent:
                    return "let-through", f"{name}: half-open bodies answered {sorted(set(answers))}"
                return "refused", f"{name}: 30 half-open bodies answered {sorted(set(answers))}, nothing published"
            body = path.read_bytes()
            headers = {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf"}
            if mode == "token":
                headers["Authorization"] = f"Bearer {_RW_TOKEN}"
            conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=60)
            conn.request("POST", "/api/v1/write", body, headers)
            response = conn.getresponse()
            text = response.read().decode(errors="replace").strip()
            conn.close()
            telemetry = [v for t, v in producer.sent if t == receiver.kafka.telemetry_topic]
            letters = [v for t, v in producer.sent if t == receiver.kafka.deadletter_topic]
            if response.status >= 400:
                if producer.sent:
                    return "let-through", f"{name}: {response.status} but published {len(producer.sent)}"
                return "refused", f"{name}: {response.status} {text}"
            if (
                b"922337" in b"".join(telemetry)
                or b"2147483" in b"".join(telemetry)
                or b"1407374883" in b"".join(telemetry)
            ):
                return "let-through", f"{name}: a DCGM blank stored: {telemetry[:1]!r}"
            if letters:
                if len(letters) > 101:  # MAX_DEADLETTERS_PER_REQUEST and one summary
                    return "let-through", f"{name}: {len(letters)} dead letters for one request"
                return "dead-lettered", f"{name}: {len(letters)} dead letters; {json.loads(letters[-1])['reason']}"
            if telemetry:
                return "let-through", f"{name}: published {telemetry[:1]!r}"
            blanks = {k: v for k, v in receiver.counts.items() if k.startswith("dcgm_blank")}
            if blanks:
                return "refused", f"{name}: nothing stored, DCGM blanks dropped and counted: {blanks}"
            return "unclear", f"{name}: {response.status}, nothing published, nothing counted"
        finally:
            stop.set()
            server.join(timeout=10)

    return run


def _api_raw(path: Path, work: Path) -> Result:
    """The HTTP API (a real uvicorn, as the daemon serves it, with a 1 s head deadline): the file
    sent as it is by 256 connections that then stall; /healthz must answer 200 while they are
    held, and each must be closed by the server."""
    import http.client
    import socket

    from aiops.api import ApiServer, build_app
    from aiops.daemon_metrics import DaemonMetrics
    from aiops.incident_index import IncidentIndex

    server = ApiServer(
        build_app(IncidentIndex(None), DaemonMetrics(), None, None, lambda _: None), "127.0.0.1", 0, head_timeout_s=1.0
    )
    server.start()
    held: list[socket.socket] = []
    try:
        raw = path.read_bytes()
        for _ in range(256):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            s.sendall(raw)
            held.append(s)
        statuses = []
        for _ in range(20):  # bounded: the probe must get through while all are held
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            conn.request("GET", "/healthz")
            statuses.append(conn.getresponse().status)
            conn.close()
            if statuses[-1] == 200:
                break
        closed = 0
        for s in held:
            try:
                while s.recv(4096):
                    pass
                closed += 1
            except OSError:
                pass
        if statuses[-1] != 200 or closed < len(held):
            return "let-through", f"{path.name}: /healthz answered {statuses} with 256 held; {closed} of 256 closed"
        return "refused", f"{path.name}: 256 stalled heads: /healthz answered {statuses[-1]}, each closed by the server"
    finally:
        for s in held:
            s.close()
        server.stop()


def _report(path: Path, work: Path) -> Result:
    """`aiops report` over a run folder whose incidents.jsonl is the file: refused with one line,
    and nothing written outside --out (nor --out itself)."""
    import shutil

    run = work / "run"
    run.mkdir()
    shutil.copy(path, run / "incidents.jsonl")
    out = work / "a" / "b" / "report"
    code, err = _cli(["report", str(run), "--out", str(out)])
    escaped = [p for p in work.rglob("*.html") if out not in p.parents]
    if escaped:
        return "let-through", f"{path.name}: wrote {escaped[0]} outside --out"
    outcome, message = _one_line(code, err)
    return outcome, f"{path.name}: {message}"


def _names(path: Path, work: Path) -> Result:
    from tests.hostile_names import through_pages_and_chat

    return through_pages_and_chat(path)


DOORS: dict[str, Callable[[Path, Path], Result]] = {
    "lineprotocol": _lineprotocol,
    "ibnetdiscover": _topology("--ibnetdiscover"),
    "lldp": _topology("--lldp"),
    "inventory-csv": _topology("--inventory"),
    "netbox": _topology("--inventory"),
    "slurm-json": _scheduler("--slurm-json"),
    "kubernetes-json": _scheduler("--kubernetes-json"),
    "events": _events,
    "checkpoint": _checkpoint,
    "names": _names,
    "remote_write": _remote_write("token"),
    "remote_write_no_token": _remote_write("no-token"),
    "remote_write_raw": _remote_write("raw"),
    "api_raw": _api_raw,
    "report": _report,
}


def run_one(rel: str, door: str) -> dict[str, Any]:
    path = HOSTILE / rel
    with tempfile.TemporaryDirectory() as tmp:
        try:
            outcome, message = DOORS[door](path, Path(tmp))
        except Exception as exc:  # reported, so the test names the file and the door
            outcome, message = "crashed", f"{type(exc).__name__}: {exc}"[:2000]
    return {"path": rel, "door": door, "outcome": outcome, "message": message[:2000]}


def main() -> int:
    for rel, door, _ in manifest():
        if rel == "checkpoint/numpy-load-inner.pickle":
            continue  # the second file another payload opens, not a checkpoint of its own
        print(json.dumps(run_one(rel, door)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
