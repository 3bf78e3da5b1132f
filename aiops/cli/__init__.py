"""`aiops`: one command line for every stage (aiops/cli/commands.py); the subcommands' modules beside it."""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    # imported on call: `aiops.cli.common` (which the benches import) loads without every subcommand
    from aiops.cli.commands import main as run

    return run(argv)
