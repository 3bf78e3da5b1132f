"""The `aiops` command line: the parser, built from each group's `add_parsers` (one module per
group beside this one) and from the plugins other code registers, and `main`, which runs the
command the arguments name. Nothing here holds logic worth testing on its own."""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import sys
from collections.abc import Callable, Sequence

from aiops.cli import (
    dashboards,
    demo_command,
    detection,
    generate,
    predictor,
    rca,
    reference,
    report,
    scheduler,
    score_csv,
    telemetry,
    topology,
)
from aiops.cli.common import CliError

Handler = Callable[[argparse.Namespace], int]

DESCRIPTION = (
    "`aiops`: one command line for every stage. Subcommands parse arguments and call library code; "
    "nothing here holds logic worth testing on its own."
)
# In the order `aiops --help` lists them; each adds its subcommands with their handlers.
GROUPS = (
    reference,  # catalog, thresholds, check-recording
    telemetry,  # produce, replay, ingest
    generate,  # gen
    detection,  # detect
    rca,  # run, eval
    topology,
    scheduler,
    report,
    dashboards,
    predictor,
    score_csv,
    demo_command,  # demo
)
# Subcommands from outside the product, found by entry point as pytest and flake8 find theirs:
# an entry `name = "module:add_parsers"` in this group (pyproject.toml registers the benches' as
# `bench`), called with the subparsers once the product's own are in.
PLUGINS = "aiops.commands"
NO_BENCH = (
    "aiops bench is not here: the benches are a plugin that installing the project registers "
    "(pip install -e '.[bench]'), found through the entry point group aiops.commands"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aiops", description=DESCRIPTION)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.add_parsers(sub)
    added = add_plugins(sub)
    if "bench" not in added:  # where it is missing, the help says why
        parser.epilog = NO_BENCH
    return parser


def add_plugins(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> list[str]:
    """Each entry point of the plugin group adds its subcommands; returns their names. Nothing of a
    plugin is imported unless it is installed, and then only its `add_parsers` module."""
    entries = sorted(importlib.metadata.entry_points(group=PLUGINS), key=lambda e: e.name)
    for entry in entries:
        entry.load()(sub)
    return [entry.name for entry in entries]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # kafka-python warns whenever one large send holds its I/O loop for >100 ms; that is
    # expected with megabyte batches and says nothing the operator can act on.
    logging.getLogger("kafka.net.selector").setLevel(logging.ERROR)
    handler: Handler = args.handler
    from vocab.settings import unknown_variables

    for name, nearest in unknown_variables(os.environ):  # a misspelt setting is no setting at all
        hint = f" (did you mean {nearest}?)" if nearest else ""
        logging.getLogger("aiops.settings").warning(
            "%s is set but is no aiops setting: ignored%s; settings: docs/configuration.md", name, hint
        )
    from aiops.cli.checks import ArgumentError, check

    try:  # before the command imports its stage: a bad argument is refused in well under a second
        check(args)
    except ArgumentError as exc:
        print(f"aiops: {exc}", file=sys.stderr)
        return 2
    try:
        return handler(args)
    except CliError as exc:
        print(f"aiops: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a service error: one clear line, not a traceback
        from ingest.influx_writer import InfluxUnavailableError, InfluxWriteError
        from ingest.kafka import KafkaIOError

        if isinstance(exc, KafkaIOError | InfluxWriteError | InfluxUnavailableError):
            print(f"aiops: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    raise SystemExit(main())
