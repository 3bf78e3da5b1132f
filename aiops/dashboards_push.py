"""`aiops dashboards push --url URL --token TOKEN [--folder F]`: the dashboards in dashboards/json
into a Grafana that does not provision from files, through grafana-client (the maintained fork of
the design card's grafana-api, unmaintained since 2020).

Idempotent by uid: each dashboard is saved with `overwrite` and its own uid (POST
/api/dashboards/db), so pushing twice leaves one copy, at the newer version; the folder is found
by its uid, or by title, and made when missing (GET/POST /api/folders). The InfluxDB datasource the
dashboards name by uid is looked up first (GET /api/datasources/uid/{uid}) and its absence said
plainly: the panels would show nothing.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DASHBOARDS = Path(__file__).resolve().parents[1] / "dashboards" / "json"
DATASOURCE_UID = "aiops-influxdb"  # dashboards/provisioning/datasources/influxdb.yaml
FOLDER_UID = "aiops"


class PushError(RuntimeError):
    """Grafana refused or could not be reached; the message says which dashboard and why."""


@dataclass
class Pushed:
    folder_uid: str
    dashboards: list[dict[str, Any]] = field(default_factory=list)  # Grafana's answers
    datasource_found: bool = True


def load_dashboards(folder: Path = DASHBOARDS) -> list[dict[str, Any]]:
    out = []
    for path in sorted(folder.glob("*.json")):
        board = json.loads(path.read_text())
        if not board.get("uid"):
            raise PushError(f"{path.name} has no uid: it could not be pushed idempotently")
        out.append(board)
    return out


def push(url: str, token: str, folder: str = "AIOps", dashboards: list[dict[str, Any]] | None = None) -> Pushed:
    from grafana_client.api import GrafanaApi
    from grafana_client.client import GrafanaClientError, GrafanaException

    api = GrafanaApi.from_url(url, credential=token)
    boards = load_dashboards() if dashboards is None else dashboards
    try:
        try:
            api.datasource.get_datasource_by_uid(DATASOURCE_UID)
            found = True
        except GrafanaClientError as exc:
            if exc.status_code != 404:
                raise
            found = False
            log.warning(
                "Grafana at %s has no datasource with uid %s: add the InfluxDB datasource "
                "(dashboards/provisioning/datasources/influxdb.yaml) or the panels stay empty",
                url,
                DATASOURCE_UID,
            )
        folder_uid = _folder(api, folder)
        result = Pushed(folder_uid, datasource_found=found)
        for board in boards:
            body = {
                "dashboard": {**board, "id": None},
                "folderUid": folder_uid,
                "overwrite": True,
                "message": "aiops dashboards push",
            }
            try:
                result.dashboards.append(api.dashboard.update_dashboard(body))
            except GrafanaException as exc:
                raise PushError(f"Grafana refused dashboard {board['uid']} ({board.get('title')}): {exc}") from None
        return result
    except GrafanaException as exc:
        raise PushError(f"Grafana at {url}: {exc}") from None
    except OSError as exc:
        raise PushError(f"Grafana at {url} cannot be reached: {exc}") from None


def _folder(api: Any, title: str) -> str:
    """The folder's uid: ours if it is there, else one of that title, else a new one."""
    folders = api.folder.get_all_folders()
    for f in folders:
        if f.get("uid") == FOLDER_UID or f.get("title") == title:
            return str(f["uid"])
    made = api.folder.create_folder(title, uid=FOLDER_UID)
    return str(made["uid"])


__all__ = ["DASHBOARDS", "PushError", "Pushed", "load_dashboards", "push"]
