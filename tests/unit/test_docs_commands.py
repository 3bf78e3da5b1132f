"""Every command the README and the manual show still exists as written: each `aiops ...` line in
a shell block names a real subcommand (its `--help` runs) and only options that subcommand has;
each `scripts/...` it runs is there and executable."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from aiops.cli import main
from aiops.cli.commands import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```(?:bash|sh|console)\n(.*?)```", re.S)
ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def _commands(page: Path) -> list[tuple[int, list[str]]]:
    """(line number, words) of each command line in the page's shell blocks."""
    text = page.read_text()
    out = []
    for block in BLOCK.finditer(text):
        start = text[: block.start()].count("\n") + 2
        joined = block.group(1).replace("\\\n", " ")
        for offset, raw in enumerate(joined.splitlines()):
            # each command of a line: `a && b`, `a; b`, `for ...; do a`
            for part in re.split(r"\s(?:&&|\|\||;|\|)\s|;\s*(?:do|then)\s", raw.split(" #")[0]):
                try:
                    words = shlex.split(part.strip())
                except ValueError:  # an unclosed quote spanning lines (a multi-line env value)
                    continue
                while words and (ENV.match(words[0]) or words[0] in ("do", "then", "time")):
                    words.pop(0)
                if words and (words[0] == "aiops" or words[0].startswith(("scripts/", "./scripts/"))):
                    out.append((start + offset, words))
    return out


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _resolve(words: list[str]) -> tuple[list[str], argparse.ArgumentParser]:
    parser = build_parser()
    path: list[str] = []
    rest = words[1:]
    while rest and rest[0] in (subs := _subparsers(parser)):
        path.append(rest.pop(0))
        parser = subs[path[-1]]
    return path, parser


CASES = [(page, n, words) for page in PAGES for n, words in _commands(page)]


def test_the_pages_show_commands() -> None:
    assert len([c for c in CASES if c[2][0] == "aiops"]) >= 20


@pytest.mark.parametrize(("page", "line", "words"), CASES, ids=[f"{p.name}:{n}" for p, n, _ in CASES])
def test_a_shown_command_exists_as_written(
    page: Path, line: int, words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    if words[0] != "aiops":
        script = ROOT / words[0].removeprefix("./")
        assert script.is_file() and script.stat().st_mode & 0o111, f"{page.name}:{line}: {words[0]} is not a script"
        return
    path, parser = _resolve(words)
    assert path, f"{page.name}:{line}: `{' '.join(words[:3])}` names no aiops subcommand"
    known = {s for a in parser._actions for s in a.option_strings}
    used = {w.split("=", 1)[0] for w in words if w.startswith("--")}
    assert used <= known, f"{page.name}:{line}: `aiops {' '.join(path)}` has no {sorted(used - known)}"
    with pytest.raises(SystemExit) as done:
        main([*path, "--help"])
    assert done.value.code == 0
    capsys.readouterr()


def test_every_compose_command_of_the_site_checklist_names_the_site_file() -> None:
    """The README's split-profile command once left out `-f compose.site.yml`: run at a site, it
    recreates Kafka with its loopback ports only and the GPU nodes lose the broker."""
    readme = (ROOT / "README.md").read_text()
    site = readme.split("## Pointing it at a real cluster", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"docker compose [^`\n#]*", site.replace("\n   ", " "))
    assert len(commands) >= 3
    assert [c for c in commands if "-f compose.site.yml" not in c] == []
