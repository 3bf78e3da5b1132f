"""What a client can make the HTTP API read, hold and show (issue 44, finding 7: a 300 MB POST to
an acknowledge route without a token was read and parsed whole before the 401; the daemon went
from 146 MB to 1.29 GB). Asked of the real uvicorn server over raw sockets, so that a test can
send the headers and a little of a body, and see the answer come before the rest is sent: a body
over the limit (stated or chunked) is refused unread, a mutation without the token is refused
before its body, pages carry a Content-Security-Policy that allows exactly their own inline script
and styles, and names, notes and ids outside their bounds are refused with a 422 naming the field
or the rule (the hostile strings: tests/data/hostile/names/api-bodies.json)."""

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
from aiops.api import MAX_BODY_BYTES, MAX_NAME_CHARS, MAX_NOTE_CHARS, Guard
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
            assert status == 422 and "[rule api.id." in answer["detail"], (bad, path, answer)
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
