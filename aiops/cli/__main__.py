"""`python -m aiops.cli`: the `aiops` command (what the fault tests and containers without the
console script run)."""

from aiops.cli import main

raise SystemExit(main())
