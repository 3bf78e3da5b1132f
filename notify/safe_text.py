"""Data as text in a chat message: an entity name, a job name, evidence or an action reaches a
chat service as words to read, never as markup it obeys (issue 44, finding 5).

Every data field goes through one of the escapers here before it is put into a payload; the
words around it (labels, bold, the link lines) are ours. What each does, and why:

- one line per field (`one_line`): CR, LF, tab, VT, FF, NEL, U+2028/2029 become a space, so
  data can never start a line of its own (a forged `- **Action**: run curl … | sudo sh`, a
  `### RESOLVED` heading, a `[1]: https://…` link definition, a `> quote`). Other control and
  format characters (bidi overrides such as U+202E, zero-width U+200B-U+200D, U+2060, U+FEFF,
  NUL, ESC, lone surrogates that JSON can carry) are shown as `⟨U+202E⟩`: visible, so a name
  that looks like another is seen to differ, and no byte a UTF-8 encoder refuses remains.
  Each field is cut at FIELD_MAX_CHARS with a note of its full length.
- no link made by data (`_defang`): a WORD JOINER (U+2060, invisible, no width) goes after every
  ":" followed by "/" (a scheme's, even inside a word: `n0_https://…`) and after every `www`, so
  no client's autolinker sees a URL, while the text reads the same. Link syntax is broken
  separately per format (below). A bare domain ("evil.example") may still be autolinked by a
  client; its text is then its own target, not a disguise. The only links in a message are the
  service's incident and Grafana URLs, built by message.py from the configuration.
- no mention made by data: a WORD JOINER after an "@" that starts a word (`@all`, `@here`,
  `@channel`, `@所有人`) so no client parses it; "user@site" inside a word stays as it is. The
  angle forms (`<!channel>`, `<!here>`, `<@U123>`, `<!subteam^…>`, Feishu's `<at id=all>`,
  WeCom's `<@userid>`, Teams' `<at>`) all need "<", which no format lets through.

Per format:

- `markdown_text` (DingTalk markdown, Feishu/Lark card `lark_md`, WeCom markdown, Microsoft Teams
  Adaptive Card TextBlock and FactSet, the webhook's display text, Apprise): none of these
  renderers documents a backslash escape or entity decoding we could rely on (DingTalk and
  WeCom render a CommonMark-like subset plus `<font>`; lark_md adds `<at>` and `<font>`; Teams'
  TextBlock renders a markdown subset and `{{DATE()}}`), so the characters that make markup are
  replaced by look-alikes that no renderer reads: `*`→`∗`, `~`→`∼`, a backtick→`ˋ`, `[`/`]`→
  `［`/`］`, `<`/`>`→`‹`/`›`, `&`→`＆`, `\\`→`∖`, `{`/`}`→`｛`/`｝`, and `_` → `ˍ` unless it is
  between two letters or digits (CommonMark never emphasises an intraword "_", so `link_downed`
  and `n_01` stay as they are). A link needs "[…](", an image "![", a tag or mention "<": none
  can form. Names of the id grammar (letters, digits, `. _ : / - + @`) look exactly as before.
- `slack_text` (Slack mrkdwn, always sent with `verbatim: true`, which turns off Slack's
  autolinking of URLs, channel names and mentions): "&", "<", ">" become `&amp;` `&lt;` `&gt;`
  as Slack documents (a link, mention or `<!channel>` needs a raw "<"); Slack has no escape for
  `*_~` and backticks, so those get the same look-alikes as above (and "[", "]", in case a
  client renders Markdown links; "{", "}" so one message reads the same in every format).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

# The longest id the grammar admits (vocab.bounds.MAX_ID_LENGTH is 512), so no valid id is ever cut;
# anything longer is free text, and the whole of it is on the incident page.
FIELD_MAX_CHARS = 512
WORD_JOINER = "\u2060"

_BREAKS = re.compile("[\r\n\t\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]+")
# Every ":" before a "/" and every "www.", wherever it stands: an autolinker may find a URL inside
# a word ("n0_https://…", a scheme after 40 letters), so no word boundary is asked for.
_SCHEME = re.compile(r":(?=/)")
_WWW = re.compile(r"(?i)(www)\.")
_MENTION = re.compile(r"(?<!\w)@")
_LONE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_MARKDOWN = str.maketrans(
    {
        "*": "∗",
        "~": "∼",
        "`": "ˋ",
        "[": "［",
        "]": "］",
        "<": "‹",
        ">": "›",
        "&": "＆",
        "\\": "∖",
        "{": "｛",
        "}": "｝",
    }
)
_SLACK = str.maketrans(
    {"*": "∗", "~": "∼", "`": "ˋ", "[": "［", "]": "］", "{": "｛", "}": "｝", "&": "&amp;", "<": "&lt;", ">": "&gt;"}
)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _visible(c: str) -> str:
    # Cc control, Cf format (bidi, zero-width, word joiner), Cs lone surrogate
    return f"⟨U+{ord(c):04X}⟩" if unicodedata.category(c) in ("Cc", "Cf", "Cs") else c


def one_line(value: object, limit: int = FIELD_MAX_CHARS) -> str:
    """`value` as one line of visible text, at most `limit` characters plus a note of the cut."""
    text = str(value)
    full = len(text)
    text = _BREAKS.sub(" ", text[: limit * 2])  # enough to fill `limit` even where breaks collapse
    text = "".join(_visible(c) for c in text)
    if len(text) > limit or full > limit * 2:
        return text[:limit] + f"… ({full:,} characters)"
    return text


def _defang(text: str) -> str:
    text = _SCHEME.sub(":" + WORD_JOINER, text)
    text = _WWW.sub(lambda m: m.group(1) + WORD_JOINER + ".", text)
    return _MENTION.sub("@" + WORD_JOINER, text)


def markdown_text(value: object) -> str:
    """A data field for DingTalk, Feishu lark_md, WeCom, Teams and generic Markdown."""
    text = _defang(one_line(value)).translate(_MARKDOWN)
    return _LONE_UNDERSCORE.sub("ˍ", text)


def slack_text(value: object) -> str:
    """A data field for Slack mrkdwn (sent with verbatim: true)."""
    text = _defang(one_line(value)).translate(_SLACK)
    return _LONE_UNDERSCORE.sub("ˍ", text)


def valid_unicode(text: str) -> str:
    """`text` with lone surrogates (JSON's "\\ud800" decodes to one; no UTF-8 encoder takes it)
    as U+FFFD, for the webhook's exact data: everything else stays as it was."""
    return _SURROGATE.sub("\ufffd", text)


def header_value(text: str) -> str:
    """`text` as an HTTP header value: printable ASCII as it is, every other byte of its UTF-8
    percent-encoded, so a key can neither end the header (CR, LF) nor make http.client refuse it."""
    raw = valid_unicode(text).encode()
    return "".join(chr(b) if 0x20 <= b < 0x7F and b != 0x25 else f"%{b:02X}" for b in raw)


def utf8_len(text: str) -> int:
    return len(text.encode())


def json_len(text: str) -> int:
    """Bytes `text` takes inside a JSON string (ensure_ascii=False): what a card's limit counts."""
    return len(text.encode()) + text.count('"') + text.count("\\") + text.count("\n")


def fit(lines: list[str], tail: list[str], budget: int, size: Callable[[str], int], note: str) -> list[str]:
    """`lines` then `tail`, joined by newlines, within `budget` as `size` counts: whole lines from
    the top while they fit, then `note` saying that the message was cut, then `tail` (the key,
    which a receiver needs to drop a repeat). A line too long on its own is cut by characters."""

    def total(ls: list[str]) -> int:
        return sum(size(x) for x in ls) + size("\n") * max(0, len(ls) - 1)

    if total(lines + tail) <= budget:
        return lines + tail
    room = budget - total([note, *tail]) - size("\n")
    kept: list[str] = []
    for line in lines:
        need = size(line) + size("\n")
        if need <= room:
            kept.append(line)
            room -= need
            continue
        if room > size("\n") + 1:  # a part of this line still fits: cut it, never mid-entity
            part, used = [], size("\n") + size("…")
            for c in line:
                if used + size(c) > room:
                    break
                part.append(c)
                used += size(c)
            kept.append(_PARTIAL_ENTITY.sub("", "".join(part)) + "…")
        break
    return [*kept, note, *tail]


_PARTIAL_ENTITY = re.compile(r"&[a-z]{0,3}$")


def cut_note(service: str, limit: str) -> str:
    return f"… cut to fit {service}'s {limit}; the incident page has everything"
