"""The command line as a package of small modules: one per group of subcommands, each adding its
parsers; the benches' `aiops bench` a plugin found by entry point, so the product imports none of
them; no function of the package too long to hold in mind."""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import tomllib
from pathlib import Path

import pytest

from aiops.cli import commands, main
from aiops.cli.commands import GROUPS, NO_BENCH, PLUGINS, build_parser

ROOT = Path(__file__).resolve().parents[2]
# as `aiops --help` has always listed them
SUBCOMMANDS = [
    "catalog",
    "thresholds",
    "check-recording",
    "produce",
    "replay",
    "ingest",
    "gen",
    "detect",
    "run",
    "eval",
    "topology",
    "scheduler",
    "report",
    "dashboards",
    "predictor",
    "score-csv",
    "demo",
]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(found.choices)


def _no_plugins(monkeypatch: pytest.MonkeyPatch, *entries: importlib.metadata.EntryPoint) -> None:
    def entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
        assert group == PLUGINS
        return list(entries)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def test_each_group_adds_its_subcommands_in_the_order_the_help_lists_them() -> None:
    assert all(callable(getattr(group, "add_parsers", None)) for group in GROUPS)
    assert list(_subcommands(build_parser())) == [*SUBCOMMANDS, "bench"]


def test_bench_is_the_benches_plugin_registered_in_pyproject() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][PLUGINS]
    assert declared == {"bench": "benchmarks.cli:add_parsers"}
    installed = {e.name: e.value for e in importlib.metadata.entry_points(group=PLUGINS)}
    assert installed == declared, "reinstall the project (scripts/bootstrap) after changing its entry points"
    bench = _subcommands(build_parser())["bench"]
    assert bench.get_default("handler").__module__ == "benchmarks.cli"
    assert "hostile-poll" in _subcommands(bench) and "nab" in _subcommands(bench)


def test_without_the_plugin_there_is_no_bench_and_the_help_says_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_plugins(monkeypatch)
    parser = build_parser()
    assert list(_subcommands(parser)) == SUBCOMMANDS
    assert parser.epilog == NO_BENCH
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    assert "aiops bench is not here" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit) as exited:
        main(["bench", "rca"])
    assert exited.value.code == 2
    assert "invalid choice: 'bench'" in capsys.readouterr().err


def add_hello(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """A plugin as another distribution would write one."""
    p = sub.add_parser("hello", help="says hello")
    p.add_argument("--to", default="world")
    p.set_defaults(handler=_hello)


def _hello(args: argparse.Namespace) -> int:
    print(f"hello {args.to}")
    return 0


def test_a_plugin_adds_its_subcommands_after_the_products(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_plugins(monkeypatch, importlib.metadata.EntryPoint("hello", f"{__name__}:add_hello", PLUGINS))
    assert list(_subcommands(build_parser())) == [*SUBCOMMANDS, "hello"]
    assert main(["hello", "--to", "you"]) == 0
    assert capsys.readouterr().out == "hello you\n"


def test_no_function_of_the_command_line_is_over_100_lines_or_10_parameters() -> None:
    too_big = []
    for path in sorted([*(ROOT / "aiops" / "cli").glob("*.py"), ROOT / "benchmarks" / "cli.py"]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                params = len(a.posonlyargs + a.args + a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 100 or params > 10:
                    too_big.append(
                        f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines} lines, {params} parameters"
                    )
    assert too_big == []


def test_the_root_only_assembles() -> None:
    # the parser and main; the subcommands' options and handlers live in their groups' modules
    tree = ast.parse(Path(commands.__file__).read_text())
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert functions == {"build_parser", "add_plugins", "main"}
