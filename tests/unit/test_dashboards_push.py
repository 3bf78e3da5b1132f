"""`aiops dashboards push` against a local HTTP server that answers as Grafana's HTTP API documents
(grafana.com/docs/grafana/latest/developers/http_api: dashboard "Create / Update dashboard" POST
/api/dashboards/db, folder "Get all folders" GET /api/folders and "Create folder" POST
/api/folders, data source "Get a single data source by UID" GET /api/datasources/uid/:uid; bearer
service-account tokens) and refuses what it would refuse: no token, a body without `dashboard`,
a dashboard without uid or title, an existing uid saved without `overwrite` (412). Grafana itself
does not run here (and is AGPL: the project only talks to the one a site runs)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from aiops.cli import main
from aiops.dashboards_push import DATASOURCE_UID, load_dashboards

TOKEN = "glsa_test_token"


class FakeGrafana:
    def __init__(self, datasource: bool = True) -> None:
        self.folders: dict[str, dict[str, Any]] = {}
        self.dashboards: dict[str, dict[str, Any]] = {}  # uid -> {dashboard, folderUid, version}
        self.requests: list[tuple[str, str]] = []
        self.datasource = datasource
        grafana = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorised(self) -> bool:
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self._send(401, {"message": "Unauthorized"})
                    return False
                return True

            def do_GET(self) -> None:
                grafana.requests.append(("GET", self.path))
                if not self._authorised():
                    return
                if self.path == f"/api/datasources/uid/{DATASOURCE_UID}":
                    if grafana.datasource:
                        self._send(200, {"uid": DATASOURCE_UID, "type": "influxdb", "name": "InfluxDB"})
                    else:
                        self._send(404, {"message": "Data source not found"})
                elif self.path == "/api/folders":
                    self._send(200, list(grafana.folders.values()))
                else:
                    self._send(404, {"message": "Not found"})

            def do_POST(self) -> None:
                grafana.requests.append(("POST", self.path))
                if not self._authorised():
                    return
                if self.headers.get("Content-Type", "").split(";")[0] != "application/json":
                    self._send(415, {"message": "Content-Type must be application/json"})
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/api/folders":
                    if not body.get("title"):
                        self._send(400, {"message": "folder title cannot be empty"})
                        return
                    uid = body.get("uid") or f"f{len(grafana.folders)}"
                    if uid in grafana.folders:
                        self._send(409, {"message": "a folder with the same uid already exists"})
                        return
                    grafana.folders[uid] = {"id": len(grafana.folders) + 1, "uid": uid, "title": body["title"]}
                    self._send(200, grafana.folders[uid])
                elif self.path == "/api/dashboards/db":
                    self._save(body)
                else:
                    self._send(404, {"message": "Not found"})

            def _save(self, body: dict[str, Any]) -> None:
                board = body.get("dashboard")
                if not isinstance(board, dict) or not board.get("title") or not board.get("uid"):
                    self._send(400, {"message": "Dashboard title cannot be empty", "status": "bad-request"})
                    return
                if board.get("id") is not None:
                    self._send(404, {"message": "Dashboard not found", "status": "not-found"})
                    return
                folder = body.get("folderUid")
                if folder is not None and folder not in grafana.folders:
                    self._send(400, {"message": "folder not found", "status": "folder-not-found"})
                    return
                uid = str(board["uid"])
                known = grafana.dashboards.get(uid)
                if known is not None and not body.get("overwrite"):
                    self._send(
                        412, {"message": "The dashboard has been changed by someone else", "status": "version-mismatch"}
                    )
                    return
                version = (known["version"] + 1) if known else 1
                grafana.dashboards[uid] = {"dashboard": board, "folderUid": folder, "version": version}
                self._send(
                    200,
                    {
                        "id": list(grafana.dashboards).index(uid) + 1,
                        "uid": uid,
                        "url": f"/d/{uid}/x",
                        "status": "success",
                        "version": version,
                    },
                )

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def grafana() -> Iterator[FakeGrafana]:
    g = FakeGrafana()
    yield g
    g.close()


def test_push_saves_every_dashboard_once_by_uid_into_its_folder(
    grafana: FakeGrafana, capsys: pytest.CaptureFixture[str]
) -> None:
    shipped = {b["uid"]: b for b in load_dashboards()}
    assert main(["dashboards", "push", "--url", grafana.url, "--token", TOKEN, "--folder", "GPU cluster"]) == 0
    assert set(grafana.dashboards) == set(shipped)
    (folder,) = grafana.folders.values()
    assert folder["title"] == "GPU cluster"
    for uid, saved in grafana.dashboards.items():
        assert saved["folderUid"] == folder["uid"] and saved["version"] == 1
        assert {k: v for k, v in saved["dashboard"].items() if k != "id"} == {
            k: v for k, v in shipped[uid].items() if k != "id"
        }
    # again: the same dashboards, a new version each, the folder found rather than made twice
    assert main(["dashboards", "push", "--url", grafana.url, "--token", TOKEN, "--folder", "GPU cluster"]) == 0
    assert set(grafana.dashboards) == set(shipped) and len(grafana.folders) == 1
    assert {s["version"] for s in grafana.dashboards.values()} == {2}
    out = capsys.readouterr().out
    assert all(f"{uid}: version 2" in out for uid in shipped)


def test_a_wrong_token_and_a_missing_datasource_are_said(
    grafana: FakeGrafana, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dashboards", "push", "--url", grafana.url, "--token", "wrong"]) == 2
    assert "Grafana" in capsys.readouterr().err and not grafana.dashboards
    grafana.datasource = False
    assert main(["dashboards", "push", "--url", grafana.url, "--token", TOKEN]) == 0
    assert "no datasource with uid aiops-influxdb" in capsys.readouterr().out
    assert main(["dashboards", "push", "--url", "http://127.0.0.1:9", "--token", TOKEN]) == 2  # nothing listens
