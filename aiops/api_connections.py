"""uvicorn's HTTP/1.1 protocol (h11) with what it lacks against clients that connect and stall
(issue 64: 64 half-open connections answered every route, /healthz included, with 503 for as long
as they were held).

uvicorn arms a timer only once a response is complete (`timeout_keep_alive`), and cancels it at
the first byte of the next request: a connection that sends nothing, or a request head without its
blank line, is held for ever. Its `limit_concurrency` counts open connections, so such sockets
starve every real request. Here:

- a request head must be whole within `head_timeout_s` of the moment the connection began waiting
  for it (its opening, or the end of the previous response); otherwise the connection is closed,
  with a 408 when part of a head came. A deadline, not an idle timer: a head sent a byte every
  second is closed as surely as a silent one.
- at most `max_open` connections; the one that crosses it closes the connection that has waited
  longest for a request head (idle or stalled), and only when every other connection has a request
  in hand is the newcomer itself closed. So stalled sockets never keep a prober out: each new
  connection displaces the oldest of them, and it sends its own head within milliseconds.

What a request holds once its head is in (its body, its task) is bounded by the API's guard
(aiops/api.py: `BODY_TIMEOUT_S`, `MAX_IN_FLIGHT`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, ClassVar

from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle
from uvicorn.server import ServerState

_BODY = b"the request head did not arrive in time\n"
_HEAD_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
    + b"x-content-type-options: nosniff\r\ncontent-length: %d\r\n\r\n" % len(_BODY)
    + _BODY
)


@dataclass
class Connections:
    """The open connections of one server, and those waiting for a request head, oldest first."""

    max_open: int
    head_timeout_s: float
    open: dict[StallGuard, None] = field(default_factory=dict)
    waiting: dict[StallGuard, None] = field(default_factory=dict)
    timed_out: int = 0  # closed for a head not whole in time
    displaced: int = 0  # closed to make room for a newer connection


class StallGuard(H11Protocol):
    """See the module's text. Subclassed per server by `guarded_protocol` (its `books`)."""

    books: ClassVar[Connections]

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._head_timer: asyncio.TimerHandle | None = None
        self._waiting_after: RequestResponseCycle | None = None  # the cycle before the awaited head

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        books = self.books
        books.open[self] = None
        self._await_head()
        if len(books.open) > books.max_open:
            # the longest waiting, this one itself when every other has a request in hand
            oldest = next(iter(books.waiting))
            books.displaced += 1
            oldest._close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self._head_timer is not None and self.cycle is not self._waiting_after:
            self._head_in()  # a request head is whole: its body and task are the guard's to bound

    def on_response_complete(self) -> None:
        answered = self.cycle
        super().on_response_complete()  # (may start a pipelined request: then it is not waiting)
        if self.cycle is answered and not self.transport.is_closing():
            self._await_head()

    def _await_head(self) -> None:
        self._head_in()
        self._waiting_after = self.cycle
        self.books.waiting[self] = None  # (the newest: last in the order)
        self._head_timer = self.loop.call_later(self.books.head_timeout_s, self._head_late)

    def _head_in(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self.books.waiting.pop(self, None)

    def _head_late(self) -> None:
        self._head_timer = None
        if self.cycle is not self._waiting_after or self.transport.is_closing():
            return
        self.books.timed_out += 1
        if self.conn.trailing_data[0]:  # (h11's unparsed bytes: part of a head came)
            self.transport.write(_HEAD_TIMEOUT)  # a client mid-request is told why; an idle one is not
        self._close()

    def _forget(self) -> None:
        self._head_in()
        self.books.open.pop(self, None)

    def _close(self) -> None:
        self._forget()
        self.transport.close()


def guarded_protocol(max_open: int, head_timeout_s: float) -> type[StallGuard]:
    """A protocol class for one uvicorn server (`Config(http=...)`), with its own books."""

    class Guarded(StallGuard):
        books = Connections(max_open, head_timeout_s)

    return Guarded
