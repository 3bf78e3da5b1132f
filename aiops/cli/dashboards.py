"""`aiops dashboards push`: the provisioned dashboards into a Grafana over its HTTP API.
`aiops dashboards inventory`: every panel and the question it answers (docs/dashboards.md)."""

from __future__ import annotations

import argparse
import os
from typing import Any


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("dashboards", help="the Grafana dashboards in dashboards/json")
    what = p.add_subparsers(dest="dashboards_command", required=True)
    push = what.add_parser("push", help="save them into a Grafana that does not provision from files (by uid)")
    push.add_argument("--url", required=True, help="Grafana's base URL, e.g. https://grafana.example:3000")
    push.add_argument(
        "--token", help="a service account token with dashboard and folder write access (default $GRAFANA_TOKEN)"
    )
    push.add_argument("--folder", default="AIOps", help="the folder to put them in (made if missing)")
    push.set_defaults(handler=cmd_push)
    inventory = what.add_parser("inventory", help="every panel, what it reads and the question it answers (Markdown)")
    inventory.add_argument("--out", metavar="FILE", help="write it there (docs/dashboards.md) instead of printing it")
    inventory.set_defaults(handler=cmd_inventory)


def cmd_inventory(args: argparse.Namespace) -> int:
    from pathlib import Path

    from aiops.cli.common import CliError
    from aiops.dashboards_inventory import InventoryError, markdown

    try:
        text = markdown()
    except InventoryError as exc:
        raise CliError(str(exc)) from None
    if args.out:
        Path(args.out).write_text(text)
        print(f"{args.out}: {text.count(chr(10) + '| ') - text.count(chr(10) + '| id |')} panels")
    else:
        print(text, end="")
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    from aiops.cli.common import CliError
    from aiops.dashboards_push import PushError, push

    token = args.token or os.environ.get("GRAFANA_TOKEN")
    if not token:
        raise CliError("give --token TOKEN or set GRAFANA_TOKEN (a Grafana service account token)")
    try:
        done = push(args.url, token, args.folder)
    except PushError as exc:
        raise CliError(str(exc)) from None
    for answer in done.dashboards:
        print(f"{answer.get('uid')}: version {answer.get('version')} at {args.url.rstrip('/')}{answer.get('url', '')}")
    if not done.datasource_found:
        print("warning: no datasource with uid aiops-influxdb in that Grafana: the panels will be empty")
    return 0
