"""A misspelt AIOPS_* variable is said, with the nearest name, not silently ignored (issue 65)."""

from __future__ import annotations

import logging

import pytest

from aiops.cli import main
from vocab.settings import OTHER_VARIABLES, setting_variables, unknown_variables


def test_every_setting_and_nested_group_is_a_known_variable() -> None:
    known = setting_variables()
    for name in (
        "AIOPS_KAFKA__BOOTSTRAP",
        "AIOPS_KAFKA__SASL_PASSWORD",
        "AIOPS_INFLUX__URL",
        "AIOPS_SCRAPE_INTERVAL_S",
        "AIOPS_NOTIFY_CONFIG",
        "AIOPS_DETECTORS__SAG__DROP_DB",
        "AIOPS_DETECTORS__PEERS__PERSIST_TICKS",
    ):
        assert name in known, name
    env = dict.fromkeys([*known, *OTHER_VARIABLES, "AIOPS_SLURM_REST", "PATH"], "x")
    assert unknown_variables(env) == []


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("AIOPS_KAFKA_BOOTSTRAP", "AIOPS_KAFKA__BOOTSTRAP"),  # one underscore: no group, no setting
        ("AIOPS_SCRAPE_INTERVAL", "AIOPS_SCRAPE_INTERVAL_S"),
        ("AIOPS_NOTIFY_CONFIGS", "AIOPS_NOTIFY_CONFIG"),
        ("AIOPS_INFLUX__TOKN", "AIOPS_INFLUX__TOKEN"),
    ],
)
def test_a_misspelt_variable_is_named_with_the_nearest_setting(typo: str, meant: str) -> None:
    assert unknown_variables({typo: "1"}) == [(typo, meant)]


def test_the_command_line_warns_of_each(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("AIOPS_KAFKA_BOOTSTRAP", "kafka:9092")
    with caplog.at_level(logging.WARNING, logger="aiops.settings"):
        assert main(["catalog"]) == 0
    (record,) = [r for r in caplog.records if r.name == "aiops.settings"]
    assert "AIOPS_KAFKA_BOOTSTRAP" in record.getMessage() and "AIOPS_KAFKA__BOOTSTRAP" in record.getMessage()
