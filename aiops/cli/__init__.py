"""`aiops`: one command line for every stage. commands.py builds the parser from one module per
group of subcommands beside it (each with its `add_parsers` and handlers) and from plugins (the
benches' `aiops bench`, by entry point); common.py is what they share."""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    # imported on call: `aiops.cli.common` (which the benches import) loads without every subcommand
    from aiops.cli.commands import main as run

    return run(argv)
