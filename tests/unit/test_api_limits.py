"""What a client can make the HTTP API read, hold and show (issue 44, finding 7: a 300 MB POST to
an acknowledge route without a token was read and parsed whole before the 401; the daemon went
from 146 MB to 1.29 GB). Asked of the real uvicorn server over raw sockets, so that a test can
send the headers and a little of a body, and see the answer come before the rest is sent: a body
over the limit (stated or chunked) is refused unread, a mutation without the token is refused
before its body, pages carry a Content-Security-Policy that allows exactly their own inline script
and styles, and names, notes and ids outside their bounds are refused with a 422 naming the field
or the rule (the hostile strings: tests/data/hostile/names/api-bodies.json). And (issue 64, item
4) clients that connect and stall: half-open connections, bodies that never come, a cap filled
with stalled sockets; none of them keeps /healthz from its 200, and each is closed in the end."""

from __future__ import annotations

import asyncio
import html
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from act.loop import sign
from aiops.api import API_CSP, MAX_BODY_BYTES, MAX_NAME_CHARS, MAX_NOTE_CHARS, ApiServer, Guard, build_app
from aiops.daemon_metrics import DaemonMetrics
from aiops.incident_index import IncidentIndex
from show.page import csp_hash
from tests.unit.test_act_approval import SECRET, Recorder, call, served  # noqa: F401 (a fixture)
from tests.unit.test_api import TOKEN, Api

HOSTILE = json.loads((Path(__file__).parents[1] / "data" / "hostile" / "names" / "api-bodies.json").read_text())
# Long enough that a server waiting for a body that never comes shows as a failure, not a hang.
ANSWER_WITHIN_S = 10.0


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    a = Api(tmp_path)
    yield a
    a.close()


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def exchange(port: int, head: str, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    """Sends the request line and headers (and what there is of a body), then reads the answer
    to the end of the connection: the status, the headers, the body. A server that waits for the
    rest of the body answers nothing, and the read times out (socket.timeout: the test fails)."""
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WITHIN_S) as s:
        s.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break  # (the server closed with part of our body unread: what it says came first)
            if not chunk:
                break
            data += chunk
    raw_head, _, answer = data.partition(b"\r\n\r\n")
    lines = raw_head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, answer


def post_head(path: str, length: int | None, token: str | None = None, type_: str = "application/json") -> str:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Type: {type_}"]
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    if token:
        lines.append(f"Authorization: Bearer {token}")
    return "\n".join(lines) + "\n"


def test_a_300_mb_post_without_a_token_is_refused_before_its_body_is_read(api: Api) -> None:
    port = _port(api.base)
    first = b'{"by": "' + b"x" * 4096  # a little of the 300 MB; the rest is never sent
    status, headers, body = exchange(port, post_head("/api/incidents/inc-1/ack", 300_000_000), first)
    assert status == 413 and "65,536" in json.loads(body)["detail"]
    assert headers["connection"] == "close"  # and closed: the rest would not be read either
    # with the token too: the limit is on the body, whoever sends it
    assert exchange(port, post_head("/api/incidents/inc-1/ack", 300_000_000, TOKEN), first)[0] == 413
    assert api.index.get("inc-1")["acknowledged"] is None  # type: ignore[index]


def test_a_mutation_without_the_token_is_refused_before_its_body_arrives(api: Api) -> None:
    port = _port(api.base)
    # headers saying 1,000 bytes follow, and none sent: only an answer that reads nothing comes back
    status, headers, body = exchange(port, post_head("/api/incidents/inc-1/ack", 1000))
    assert status == 401 and headers["www-authenticate"] == "Bearer"
    assert exchange(port, post_head("/api/silences", 1000, "wrong"))[0] == 401
    assert exchange(port, "DELETE /api/silences/sil-1 HTTP/1.1\nHost: x\nContent-Length: 1000\n")[0] == 401
    ack = json.dumps({"by": "alice"}).encode()  # and with the token the body is read as before
    status, _, body = exchange(port, post_head("/api/incidents/inc-1/ack", len(ack), TOKEN), ack)
    assert status == 200 and json.loads(body)["acknowledged"]["by"] == "alice"


def test_a_chunked_body_is_refused_at_the_limit_and_not_read_further(api: Api) -> None:
    port = _port(api.base)
    chunk = 8192
    over = b"".join(b"%x\r\n" % chunk + b"x" * chunk + b"\r\n" for _ in range(MAX_BODY_BYTES // chunk + 1))
    # never ends (no 0-length chunk): a server that reads to the end answers nothing
    status, headers, body = exchange(port, post_head("/api/silences", None, TOKEN), over)
    assert status == 413 and "not read further" in json.loads(body)["detail"]
    assert headers["connection"] == "close"
    silence = json.dumps({"match": {"kind": "leaf_down"}, "comment": "swap", "created_by": "alice"}).encode()
    whole = b"%x\r\n" % len(silence) + silence + b"\r\n0\r\n\r\n"  # under the limit: read and made
    assert exchange(port, post_head("/api/silences", None, TOKEN), whole)[0] == 201


def test_a_signed_link_without_its_signature_is_refused_before_its_body(
    served: tuple[Any, Recorder, str, str],  # noqa: F811
) -> None:
    _, _, base, pid = served
    head = post_head(f"/actions/{pid}/approve?sig=bad", 1000, type_="application/x-www-form-urlencoded")
    assert exchange(_port(base), head)[0] == 403
    assert call(f"{base}/actions/{pid}/approve?sig=%C3%A9", "POST", form="by=bob")[0] == 403  # not ASCII: not a 500


def test_pages_say_what_they_may_run_and_that_they_may_not_be_framed(api: Api) -> None:
    for path in ("/incidents", "/incidents/inc-1"):
        status, headers, page = exchange(_port(api.base), f"GET {path} HTTP/1.1\nHost: x\nConnection: close\n")
        assert status == 200, page
        assert headers["x-frame-options"] == "DENY"
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"
        policy = dict(d.strip().partition(" ")[::2] for d in headers["content-security-policy"].split(";"))
        assert policy["default-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
        assert "'unsafe-inline'" not in headers["content-security-policy"]
        # what Chromium would refuse, checked here without it: every inline script and style, and
        # every style attribute, is named by its hash; no inline event handler is there to refuse
        text = page.decode()
        for script in re.findall(r"<script>(.*?)</script>", text, re.S):
            assert csp_hash(script) in policy["script-src"].split()
        for style in re.findall(r"<style>(.*?)</style>", text, re.S):
            assert csp_hash(style) in policy["style-src"].split()
        for attribute in re.findall(r'\sstyle="([^"]*)"', text):
            assert (
                "'unsafe-hashes'" in policy["style-src"] and csp_hash(html.unescape(attribute)) in policy["style-src"]
            )
        assert not re.search(r"<[^>]*\son[a-z]+=", text)
    status, headers, _ = exchange(_port(api.base), "GET /api/incidents HTTP/1.1\nHost: x\nConnection: close\n")
    assert status == 200 and headers["x-content-type-options"] == "nosniff"


def test_the_approval_page_runs_nothing_and_posts_only_to_the_daemon(
    served: tuple[Any, Recorder, str, str],  # noqa: F811
) -> None:
    _, _, base, pid = served
    head = f"GET /actions/{pid}?sig={sign(SECRET, pid)} HTTP/1.1\nHost: x\nConnection: close\n"
    status, headers, _ = exchange(_port(base), head)
    assert status == 200 and headers["x-frame-options"] == "DENY"
    assert headers["content-security-policy"].startswith("default-src 'none'; form-action 'self'")


def test_names_and_notes_are_bounded_and_hold_no_control_characters(api: Api) -> None:
    long_name, long_note = "a" * (MAX_NAME_CHARS + 1), "n" * (MAX_NOTE_CHARS + 1)
    for body, field in [
        ({"by": long_name}, "by"),
        ({"by": "alice", "comment": long_note}, "comment"),
        *(({"by": name}, "by") for name in HOSTILE["names"]),
        *(({"by": "alice", "comment": note}, "comment") for note in HOSTILE["notes"]),
    ]:
        status, answer = api.call("POST", "/api/incidents/inc-1/ack", body, TOKEN)
        assert status == 422 and answer["detail"][0]["loc"] == ["body", field], (body, answer)
    silence = {"match": {"kind": "leaf_down"}, "comment": "swap", "created_by": long_name}
    status, answer = api.call("POST", "/api/silences", silence, TOKEN)
    assert status == 422 and answer["detail"][0]["loc"] == ["body", "created_by"]
    assert api.call("POST", "/api/incidents/inc-1/ack", {"by": "alice", "comment": "a\n\tb"}, TOKEN)[0] == 200


def test_an_approvers_name_is_bounded_on_both_doors(served: tuple[Any, Recorder, str, str]) -> None:  # noqa: F811
    loop, _, base, pid = served
    status, answer = call(f"{base}/api/actions/{pid}/approve?by={'a' * (MAX_NAME_CHARS + 1)}", "POST", token="tok")
    assert status == 422 and json.loads(answer)["detail"][0]["loc"] == ["query", "by"]
    signed = f"{base}/actions/{pid}/approve?sig={sign(SECRET, pid)}"
    for name in ["b" * (MAX_NAME_CHARS + 1), *HOSTILE["names"]]:
        status, answer = call(signed, "POST", form="by=" + quote(name))
        assert status == 422 and json.loads(answer)["detail"][0]["loc"] == ["body", "by"], (name, answer)
    assert loop.audit.get(pid).approved_by is None
    assert call(signed, "POST", form="by=" + quote("Zoë O'Brien"))[0] == 202


def test_ids_in_paths_and_silence_matchers_follow_the_grammar(api: Api) -> None:
    for bad in HOSTILE["incident_ids"]:
        for method, path in [("GET", "/api/incidents/{}"), ("GET", "/incidents/{}"), ("POST", "/api/incidents/{}/ack")]:
            status, answer = api.call(method, path.format(quote(bad, safe="")), {"by": "alice"}, TOKEN)
            assert status == 422 and "[rule ids.record." in answer["detail"], (bad, path, answer)
    assert api.call("DELETE", "/api/silences/sil-1%0Aforged", token=TOKEN)[0] == 422
    for bad in HOSTILE["matcher_entities"]:
        silence = {"match": {"entity": bad}, "comment": "swap", "created_by": "alice"}
        status, answer = api.call("POST", "/api/silences", silence, TOKEN)
        assert status == 422 and "[rule ids." in answer["detail"][0]["msg"], (bad, answer)
    for good in HOSTILE["accepted_matcher_entities"]:
        silence = {"match": {"entity": good}, "comment": "swap", "created_by": "alice"}
        assert api.call("POST", "/api/silences", silence, TOKEN)[0] == 201, good
    assert api.call("GET", "/api/incidents?entity=" + "x" * 600)[0] == 422


def test_a_body_that_does_not_arrive_is_answered_408() -> None:
    """A slow client (slowloris) holds a connection only so long. Asked of the guard alone, with
    a short timeout, since the real one is 30 s."""
    sent: list[dict[str, Any]] = []

    async def route(scope: Any, receive: Any, send: Any) -> None:
        await receive()  # the body, which never comes

    async def never() -> dict[str, Any]:
        await asyncio.Event().wait()
        raise AssertionError

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/x", "headers": [(b"transfer-encoding", b"chunked")]}
    asyncio.run(Guard(route, lambda *_: None, body_timeout_s=0.05)(scope, never, send))
    assert sent[0]["status"] == 408 and b"BODY_TIMEOUT_S" in sent[1]["body"]


@pytest.mark.parametrize("length", [MAX_BODY_BYTES, MAX_BODY_BYTES + 1])
def test_the_limit_is_the_stated_one(api: Api, length: int) -> None:
    body = json.dumps({"by": "alice", "comment": ""}).encode()
    body += b" " * (length - len(body))  # JSON allows trailing white space
    status, _, _ = exchange(_port(api.base), post_head("/api/incidents/inc-1/ack", length, TOKEN), body)
    assert status == (200 if length <= MAX_BODY_BYTES else 413)


# Issue 64, item 4: 64 half-open connections took every route down (503, /healthz included) for as
# long as they were held. Each way a client can stall before its request is whole: a connection
# with nothing sent, a request head without its blank line, a POST stating a body it never sends.
HALF_OPEN = 256
STALLS = [
    b"",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
    b"POST /api/silences HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{",
]
# Bounds on loops, not timings: how often /healthz is asked, and how long a held socket may go
# unanswered before the test gives up on the server closing it (far above any timeout it has).
HEALTHZ_TRIES = 50
CLOSED_WITHIN_S = 120.0


def _hold(port: int, count: int, stalls: list[bytes]) -> list[socket.socket]:
    held = []
    for i in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WITHIN_S)
        if stall := stalls[i % len(stalls)]:
            s.sendall(stall)
        held.append(s)
    return held


def _healthz(port: int) -> int:
    """/healthz's status, asked until it is 200 or the tries run out (each on a new connection)."""
    status = 0
    for _ in range(HEALTHZ_TRIES):
        try:
            status = exchange(port, "GET /healthz HTTP/1.1\nHost: x\nConnection: close\n")[0]
        except OSError:
            status = 0  # refused or reset: asked again
        if status == 200:
            break
    return status


def _said_before_closing(s: socket.socket) -> bytes | None:
    """What the server says on a held connection until it closes it; None if it never does."""
    s.settimeout(CLOSED_WITHIN_S)
    said = b""
    try:
        while chunk := s.recv(65536):
            said += chunk
    except ConnectionResetError:
        pass  # (closed with our bytes unread: closed all the same)
    except TimeoutError:
        return None
    return said


def test_256_half_open_connections_neither_take_healthz_down_nor_stay_open(api: Api) -> None:
    """With the daemon's own bounds (HEAD_TIMEOUT_S, MAX_CONNECTIONS): before issue 64's fix,
    /healthz answered 503 to every try while these were held, and none was ever closed."""
    port = _port(api.base)
    held = _hold(port, HALF_OPEN, STALLS)
    try:
        assert _healthz(port) == 200  # while every one of them is held
        assert api.call("GET", "/api/incidents")[0] == 200
        said = [_said_before_closing(s) for s in held]  # then the server lets go of each
    finally:
        for s in held:
            s.close()
    assert None not in said
    for stall, answer in zip(STALLS * HALF_OPEN, said, strict=False):
        if stall.startswith(b"GET"):
            assert answer is not None and answer.startswith(b"HTTP/1.1 408 ")  # told why
        elif stall.startswith(b"POST"):
            assert answer is not None and answer.startswith(b"HTTP/1.1 413 ")  # refused unread
        else:
            assert answer == b""  # (nothing asked, nothing said)


def _server(**bounds: Any) -> tuple[ApiServer, int]:
    app_bounds = {k: bounds.pop(k) for k in ("body_timeout_s", "max_in_flight") if k in bounds}
    app = build_app(IncidentIndex(None), DaemonMetrics(), None, TOKEN, lambda _: None, **app_bounds)
    server = ApiServer(app, "127.0.0.1", 0, **bounds)
    server.start()
    return server, server.port


def test_past_the_connection_cap_a_new_connection_displaces_the_oldest_stalled_one() -> None:
    """Timeouts alone let a client that reconnects keep any cap full; so the connection over the
    cap closes the one that has waited longest for a head (a long timeout here, so only that acts)."""
    server, port = _server(max_connections=16, head_timeout_s=3600.0)
    held: list[socket.socket] = []
    try:
        held = _hold(port, 48, STALLS[:2])
        assert _healthz(port) == 200
        assert server.protocol.books.displaced >= 48 - 16
        assert all(_said_before_closing(s) is not None for s in held[:16])  # the oldest: closed
    finally:
        for s in held:
            s.close()
        server.stop()


def test_requests_past_the_in_flight_cap_are_refused_but_healthz_is_answered() -> None:
    """Requests whose bodies never come (with the token: past the guard's gate) each hold a
    task until the body deadline; past MAX_IN_FLIGHT others get 503, /healthz its 200."""
    server, port = _server(body_timeout_s=2.0, max_in_flight=8)
    head = post_head("/api/silences", 1000, TOKEN).replace("\n", "\r\n").encode() + b"\r\n{"
    held: list[socket.socket] = []
    try:
        held = _hold(port, 12, [head])
        status = 0
        for _ in range(HEALTHZ_TRIES):  # (the held requests reach the guard as the server reads them)
            status = exchange(port, "GET /api/incidents HTTP/1.1\nHost: x\nConnection: close\n")[0]
            if status == 503:
                break
        assert status == 503
        assert _healthz(port) == 200
        said = [_said_before_closing(s) or b"" for s in held]
        statuses = sorted(int(a.split()[1]) for a in said)  # (whichever 8 reached the guard first)
        assert statuses == [408] * 8 + [503] * 4, said  # and closed, each of them
        assert exchange(port, "GET /api/incidents HTTP/1.1\nHost: x\nConnection: close\n")[0] == 200
    finally:
        for s in held:
            s.close()
        server.stop()


def test_a_body_trickled_in_is_refused_at_the_deadline_not_per_read() -> None:
    """A byte well within the timeout each time must still not hold the request for ever."""
    sent: list[dict[str, Any]] = []
    reads = 0

    async def route(scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass

    async def trickle() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        assert reads < 1000, "read on past the body deadline"
        await asyncio.sleep(0.01)
        return {"type": "http.request", "body": b"x" if reads % 2 else b"", "more_body": True}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/x", "headers": [(b"transfer-encoding", b"chunked")]}
    asyncio.run(Guard(route, lambda *_: None, body_timeout_s=0.2)(scope, trickle, send))
    assert sent[0]["status"] == 408


def test_every_response_says_what_it_may_load_and_docs_load_nothing_from_a_cdn(api: Api) -> None:
    port = _port(api.base)
    for path, status in [("/healthz", 200), ("/api/incidents", 200), ("/openapi.json", 200), ("/nowhere", 404)]:
        got, headers, _ = exchange(port, f"GET {path} HTTP/1.1\nHost: x\nConnection: close\n")
        assert got == status
        assert headers["content-security-policy"] == API_CSP and "frame-ancestors 'none'" in API_CSP
        assert headers["x-content-type-options"] == "nosniff"
    # FastAPI's /docs and /redoc loaded Swagger UI and ReDoc from jsDelivr, with no integrity
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        got, _, body = exchange(port, f"GET {path} HTTP/1.1\nHost: x\nConnection: close\n")
        assert got == 404 and b"cdn" not in body.lower(), path
