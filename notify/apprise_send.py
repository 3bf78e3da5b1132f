"""The long tail of services through Apprise (https://github.com/caronc/apprise, BSD-2): the
receiver's `url` is an Apprise URL (`tgram://…`, `mailto://…`, `matrixs://…`, `json://host/path`,
100+ services), and the notification goes as a title and a Markdown body.

Apprise answers only "delivered or not" (no status code), so every failure is retried with the
outbox's backoff; a wrong URL therefore retries until an operator fixes it (and the logs say so).
Apprise's own log lines can quote the URL's tokens: its logger is kept quiet, and ours redacts."""

from __future__ import annotations

import contextlib
import importlib
import logging
import warnings
from types import ModuleType

from notify.message import Notification
from notify.safe_text import markdown_text

logging.getLogger("apprise").setLevel(logging.CRITICAL)


def _apprise() -> ModuleType:
    with warnings.catch_warnings():  # Apprise's plugins import imghdr, deprecated since Python 3.11:
        warnings.simplefilter("ignore", DeprecationWarning)  # imported once here, quietly
        with contextlib.suppress(ImportError):  # (gone in 3.13, where Apprise brings its own)
            importlib.import_module("imghdr")
        import apprise
    return apprise


def available() -> bool:
    try:
        _apprise()
    except ImportError:
        return False
    return True


def send(url: str, note: Notification) -> bool:
    """True when Apprise delivered to the service behind `url`."""
    apprise = _apprise()
    sender = apprise.Apprise()
    if not sender.add(url):
        return False
    # data written as Markdown text (notify.safe_text): Apprise hands it to services that render it
    body = note.markdown() if note.incidents else note.key_line()
    title = note.title_as(markdown_text)
    return bool(sender.notify(title=title, body=body, body_format=apprise.NotifyFormat.MARKDOWN))
