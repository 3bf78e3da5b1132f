"""The real Telegraf's inputs.redfish against the Redfish BMC stand-in: what it prints parses as line
protocol, and a failed PSU, a hot inlet and the credentials all show up the way a real BMC's would."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.lineprotocol import ParsedLine, parse_line
from tests.collectors.redfish import SYSTEM_ID, RedfishServer
from vocab.catalog import FieldType

TELEGRAF = Path.home() / ".cache" / "aiops" / "bin" / "telegraf"
HOSTNAME = "gpu-node-017"

pytestmark = pytest.mark.skipif(
    not TELEGRAF.is_file(), reason=f"no Telegraf binary at {TELEGRAF} (built by the project's setup)"
)

CONFIG = """
[agent]
  omit_hostname = true

[[inputs.redfish]]
  address = "{address}"
  username = "{username}"
  password = "{password}"
  computer_system_id = "{system_id}"
  timeout = "5s"
"""


@pytest.fixture
def bmc() -> Iterator[RedfishServer]:
    with RedfishServer(HOSTNAME, psus=4, fans=6) as server:
        yield server


def _telegraf(bmc: RedfishServer, tmp_path: Path, password: str | None = None) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "redfish.conf"
    config.write_text(
        CONFIG.format(
            address=bmc.address,
            username=bmc.username,
            password=bmc.password if password is None else password,
            system_id=SYSTEM_ID,
        )
    )
    return subprocess.run(
        [str(TELEGRAF), "--config", str(config), "--test"], capture_output=True, text=True, timeout=60, check=False
    )


def _gather(bmc: RedfishServer, tmp_path: Path) -> list[ParsedLine]:
    """One `telegraf --test` run, its output parsed by the project's own line-protocol parser."""
    run = _telegraf(bmc, tmp_path)
    assert run.returncode == 0, run.stderr
    # --test prints each metric as "> <line protocol>"
    lines = [line.removeprefix("> ") for line in run.stdout.splitlines() if line.startswith("> ")]
    assert lines, f"telegraf printed no metrics:\n{run.stdout}\n{run.stderr}"
    return [parse_line(line.encode()) for line in lines]


def _number(point: ParsedLine, field: str) -> float:
    value = point.fields[field][1]
    assert isinstance(value, int | float), point
    return float(value)


def _psus(points: list[ParsedLine]) -> dict[str, ParsedLine]:
    return {p.tags["name"]: p for p in points if p.measurement == "redfish_power_powersupplies"}


def test_healthy_bmc_gives_every_measurement_with_its_tags_and_types(bmc: RedfishServer, tmp_path: Path) -> None:
    points = _gather(bmc, tmp_path)

    counts: dict[str, int] = {}
    for p in points:
        counts[p.measurement] = counts.get(p.measurement, 0) + 1
    assert counts == {
        "redfish_power_powercontrol": 1,
        "redfish_power_powersupplies": 4,
        "redfish_power_voltages": 4,
        "redfish_thermal_temperatures": 12,
        "redfish_thermal_fans": 6,
    }
    # exactly the requests the plugin makes: no service root, no collections
    assert bmc.requests == [
        f"/redfish/v1/Systems/{SYSTEM_ID}",
        "/redfish/v1/Chassis/1",
        "/redfish/v1/Chassis/1/Power",
        "/redfish/v1/Chassis/1/Thermal",
    ]
    for p in points:
        assert p.tags["source"] == HOSTNAME and p.tags["address"] == "127.0.0.1"
        if p.measurement != "redfish_power_powercontrol":
            assert (p.tags["state"], p.tags["health"]) == ("Enabled", "OK"), p

    psus = _psus(points)
    assert sorted(psus) == ["PSU1", "PSU2", "PSU3", "PSU4"]
    for psu in psus.values():
        assert set(psu.fields) == {
            "power_input_watts",
            "power_output_watts",
            "line_input_voltage",
            "last_power_output_watts",
            "power_capacity_watts",
        }
        assert all(kind is FieldType.FLOAT for kind, _ in psu.fields.values())
        assert _number(psu, "power_output_watts") > 0

    fans = [p for p in points if p.measurement == "redfish_thermal_fans"]
    # fan readings in RPM come out as integers, everything else as floats
    assert all(p.fields["reading_rpm"][0] is FieldType.INT for p in fans)
    inlet = next(
        p for p in points if p.measurement == "redfish_thermal_temperatures" and p.tags["name"] == "Inlet Temp"
    )
    assert inlet.fields["reading_celsius"] == (FieldType.FLOAT, 24.0)


@pytest.mark.parametrize("state", ["Enabled", "UnavailableOffline"])
def test_failed_psu_shows_critical_with_zero_output_and_the_rest_carry_the_load(
    bmc: RedfishServer, tmp_path: Path, state: str
) -> None:
    before = _psus(_gather(bmc, tmp_path))
    bmc.fail_psu(2, state=state)
    after = _psus(_gather(bmc, tmp_path))

    failed = after["PSU3"]
    assert failed.tags["member_id"] == "2"
    assert (failed.tags["health"], failed.tags["state"]) == ("Critical", state)
    assert failed.fields["power_output_watts"] == (FieldType.FLOAT, 0.0)
    assert failed.fields["power_input_watts"] == (FieldType.FLOAT, 0.0)
    assert failed.fields["power_capacity_watts"] == (FieldType.FLOAT, 3000.0)
    # a supply that lost its feed reads no line voltage; a faulted one still sees its feed
    line_voltage = _number(failed, "line_input_voltage")
    if state == "UnavailableOffline":
        assert line_voltage == 0.0
    else:
        assert line_voltage > 200

    survivors = [after[name] for name in ("PSU1", "PSU2", "PSU4")]
    assert all(p.tags["health"] == "OK" for p in survivors)
    total = sum(_number(p, "power_output_watts") for p in survivors)
    assert total == pytest.approx(sum(_number(p, "power_output_watts") for p in before.values()))
    for p in survivors:
        assert _number(p, "power_output_watts") > _number(before[p.tags["name"]], "power_output_watts")


def test_hot_inlet_reads_through_with_critical_health(bmc: RedfishServer, tmp_path: Path) -> None:
    bmc.set_inlet(44.5)
    points = _gather(bmc, tmp_path)
    temps = {p.tags["name"]: p for p in points if p.measurement == "redfish_thermal_temperatures"}
    inlet = temps["Inlet Temp"]
    assert inlet.fields["reading_celsius"] == (FieldType.FLOAT, 44.5)
    assert inlet.fields["upper_threshold_critical"] == (FieldType.FLOAT, 42.0)
    assert inlet.tags["health"] == "Critical"
    fans = [p for p in points if p.measurement == "redfish_thermal_fans"]
    assert min(_number(p, "reading_rpm") for p in fans) > 8400


def test_wrong_password_is_refused_and_telegraf_reports_it(bmc: RedfishServer, tmp_path: Path) -> None:
    run = _telegraf(bmc, tmp_path, password="not-the-password")
    assert run.returncode != 0
    assert "401" in run.stderr
    assert not any(line.startswith("> ") for line in run.stdout.splitlines())
    assert bmc.auth_failures == 1
