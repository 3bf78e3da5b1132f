"""A site's failure log for training the predictor: the truth format, read strictly."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from aiops.cli import main
from detectors.predict.failure_log import REPAIR_DEFAULT_S, FailureLogError, parse_failure, read_failure_log
from detectors.predict.model import card_path, load
from telemetry_gen.emit import write_folder
from telemetry_gen.generator import GenConfig, Generation


def test_a_record_takes_epoch_seconds_or_iso_times_with_a_zone() -> None:
    a = parse_failure({"kind": "gpu_hbm_ecc", "root": "n1-gpu0", "onset": 1767225600, "end": "1767229200"})
    b = parse_failure({"kind": "gpu_hbm_ecc", "root": "n1-gpu0", "onset": "2026-01-01T00:00:00Z"})
    assert (a["onset"], a["end"]) == (1767225600.0, 1767229200.0)
    assert (b["onset"], b["end"]) == (1767225600.0, 1767225600.0 + REPAIR_DEFAULT_S)


@pytest.mark.parametrize(
    ("record", "why"),
    [
        ({"kind": "gpu_hbm_ecc", "onset": 1}, "missing root"),
        ({"kind": "disk_full", "root": "n1", "onset": 1}, "not in the registry"),
        ({"kind": "gpu_thermal", "root": "n1-gpu0", "onset": "2026-01-01T00:00:00"}, "no time zone"),
        ({"kind": "gpu_thermal", "root": "n1-gpu0", "onset": 10, "end": 5}, "before onset"),
        ({"kind": "gpu_thermal", "root": "n1-gpu0", "onset": True}, "not a time"),
    ],
)
def test_a_bad_record_says_what_is_wrong(record: dict[str, object], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_failure(record)


def test_a_bad_line_stops_the_log_with_its_line_number_and_unpredictable_kinds_are_counted(tmp_path: Path) -> None:
    log = tmp_path / "failures.jsonl"
    ok = {"kind": "optic_degradation", "root": "n1-nic0-optic", "onset": 100}
    log.write_text(json.dumps(ok) + "\n" + json.dumps({"kind": "psu_failure", "root": "p1", "onset": 5}) + "\n")
    parsed = read_failure_log(log)
    assert [r["kind"] for r in parsed.records] == ["optic_degradation"]
    assert parsed.unpredictable == {"psu_failure": 1}
    log.write_text(json.dumps(ok) + "\n{not json\n")
    with pytest.raises(FailureLogError, match=r"failures.jsonl:2"):
        read_failure_log(log)


def test_the_predictor_trains_on_a_sites_own_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A site's folder: telemetry as line protocol and a failure log with ISO times and only the
    four keys training reads; no meta.json (the interval is given), nothing from the generator."""
    site = tmp_path / "site"
    faults = "gpu_hbm_ecc=4,gpu_thermal=4,optic_degradation=4,rack_cooling=3"
    gen = Generation(GenConfig(gpus=128, hours=10, interval=120, seed=71, faults=faults))
    write_folder(gen, tmp_path / "gen")
    site.mkdir()
    (tmp_path / "gen" / "telemetry.lp").rename(site / "telemetry.lp")
    with (site / "failures.jsonl").open("w") as out:
        for line in (tmp_path / "gen" / "truth.jsonl").read_text().splitlines():
            t = json.loads(line)
            iso = {k: datetime.fromtimestamp(t[k], UTC).isoformat() for k in ("onset", "end")}
            out.write(json.dumps({"kind": t["kind"], "root": t["root"], **iso}) + "\n")
    train = ["predictor", "train", "--data", str(site), "--out", str(tmp_path / "m.skops")]
    assert main(train) == 2
    assert "give --interval" in capsys.readouterr().err
    assert main([*train, "--interval", "120"]) == 0
    assert "failures that announce themselves" in capsys.readouterr().out
    model = load(tmp_path / "m.skops")
    assert {"gpu_hbm_ecc", "gpu_thermal"} <= set(model.models["gpu"].classes)
    card = json.loads(card_path(tmp_path / "m.skops").read_text())
    assert card["training_data"]["sources"] == [str(site.resolve())]
