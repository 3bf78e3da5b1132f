"""A daemon says at start whom it will tell, or that it tells no one (issue 65): chat was off
unless a commented line was found, with no line saying so."""

from __future__ import annotations

import argparse
import logging
import shutil
from pathlib import Path

import pytest

from aiops.cli.rca import _notifier
from vocab.settings import load_settings

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "notify.example.yml"


def _args(tmp_path: Path, notify_config: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(
        notify_config=notify_config, kafka="127.0.0.1:9", state_dir=str(tmp_path), group="g", out=None
    )


def test_no_config_is_said_once_at_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert _notifier(_args(tmp_path), load_settings(state_dir=tmp_path)) is None
    assert any(
        "no notify config" in r.getMessage() and "no message will be sent" in r.getMessage() for r in caplog.records
    )


def test_a_configured_path_not_there_yet_is_said_and_the_daemon_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "notify.yml"
    with caplog.at_level(logging.WARNING):
        assert _notifier(_args(tmp_path), load_settings(state_dir=tmp_path, notify_config=missing)) is None
    assert any(str(missing) in r.getMessage() and "notify.example.yml" in r.getMessage() for r in caplog.records)


def test_the_receivers_and_the_link_are_named_at_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "notify.yml"
    shutil.copy(EXAMPLE, config)
    settings = load_settings(state_dir=tmp_path, notify_config=config, public_url="https://aiops.example.org")
    notifier = _notifier(_args(tmp_path), settings)
    try:
        assert notifier is not None
        assert notifier.config.public_url == "https://aiops.example.org"  # from one place: AIOPS_PUBLIC_URL
    finally:
        notifier.stop()
    err = capsys.readouterr().err
    assert "2 receivers" in err and "oncall (webhook)" in err and "alertmanager (alertmanager)" in err
    assert "incident links to https://aiops.example.org" in err
