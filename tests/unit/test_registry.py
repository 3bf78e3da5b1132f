"""The fault and signal registry is the one home of what the service knows per fault kind, XID
and clock-event reason: it is consistent with the fault catalog (vocab/faults.toml) and the metric catalog, and nothing
else in the code defines these tables again."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from vocab import registry
from vocab.catalog import MEASUREMENT_BY_NAME

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [
    p for pkg in ("vocab", "ingest", "detectors", "rca", "telemetry_gen", "aiops") for p in (ROOT / pkg).rglob("*.py")
]
DESIGN_KINDS = {
    "gpu_fell_off_bus": "gpu",
    "gpu_hbm_ecc": "gpu",
    "gpu_thermal": "gpu",
    "gpu_nvlink": "gpu",
    "gpu_straggler": "gpu",
    "nic_link_flap": "nic",
    "optic_degradation": "optic",
    "leaf_down": "leaf",
    "pfc_storm": "nic",
    "spine_congestion": "spine",
    "psu_failure": "psu",
    "rack_cooling": "cooling",
}


# the faults operators chase that fail quietly (issue 29), with their roots
QUIET_KINDS = {
    "gpu_pcie_downtrained": "gpu",
    "gpu_nvlink_down": "gpu",
    "nvswitch_fabric_manager": "node",
    "gpu_lost": "gpu",
    "gpu_row_remap_pending": "gpu",
    "ib_link_degraded": "nic",
    "ib_link_errors": "nic",
}


def test_the_generator_injects_design_s_twelve_kinds_and_the_quiet_ones_with_their_roots() -> None:
    assert {k: registry.KINDS[k].root for k in registry.INJECTED} == DESIGN_KINDS | QUIET_KINDS
    assert set(registry.ENGINE_ONLY) == {"switch_down", "switch_congestion", "gpu_fault"}


def test_every_kind_has_an_action_a_severity_and_a_prior_with_its_source() -> None:
    for kind in registry.KINDS.values():
        assert kind.action and kind.severity in registry.SEVERITIES, kind.name
        assert kind.prior > 0 and kind.prior_source, kind.name
        assert kind.needs, f"{kind.name}: which telemetry does its detection read?"
    # the prior is field data: the share its source states, worked out from Llama 3's counts
    for kind in registry.KINDS.values():
        assert "Llama 3" in kind.prior_source, kind.name
        assert kind.prior_source.rstrip().endswith(f": {kind.prior:g}"), (kind.name, kind.prior_source)


def test_the_field_prior_adds_up_to_the_interruptions_it_was_drawn_from() -> None:
    """Llama 3 Table 5: 419 unexpected interruptions; the rows our kinds cover (GPU 268, network
    35, NIC 7, PSU 3) are 313 of them, so the kinds' shares add up to 313 / 419."""
    interrupting = [k.prior for k in registry.KINDS.values() if "not among" not in k.prior_source]
    assert abs(sum(interrupting) - 313 / 419) < 0.005


def test_a_kind_that_announces_itself_has_a_warning_action_that_differs_from_its_failure_action() -> None:
    for kind in registry.KINDS.values():
        if kind.precursor:
            assert kind.warning_action and kind.warning_action != kind.action, kind.name


def test_needed_fields_are_in_the_metric_catalog() -> None:
    for kind in registry.KINDS.values():
        for need in kind.needs:
            measurement, _, field = need.replace("#", ".").partition(".")
            m = MEASUREMENT_BY_NAME[measurement]
            assert m.metric(field) is not None or field in m.tag_keys, need


def test_xids_have_a_class_from_nvidia_s_catalog() -> None:
    application = {code for code, x in registry.XIDS.items() if x.xid_class == "application"}
    # the catalog's restart-the-application Xids whose investigation is the code, and 43 and 45,
    # which the engine has long left to the job
    assert application == {11, 13, 25, 31, 43, 45, 69, 80}
    assert registry.describe_xid(79).xid_class == "hardware"
    assert registry.describe_xid(79).suggests == "gpu_fell_off_bus"
    assert registry.describe_xid(48).xid_class == "memory" and registry.describe_xid(74).xid_class == "fabric"
    unknown = registry.describe_xid(9999)
    assert unknown.meaning == "unknown XID 9999" and unknown.xid_class == "unknown" and unknown.suggests == "gpu_fault"
    for x in registry.XIDS.values():
        assert x.suggests in registry.KINDS or x.suggests in ("gpu", "application"), x


def test_clock_event_reason_bits_are_nvml_s() -> None:
    bits = registry.CLOCK_EVENT_REASONS
    assert bits["sw_thermal_slowdown"] == 0x20 and bits["hw_thermal_slowdown"] == 0x40
    assert bits["hw_power_brake_slowdown"] == 0x80 and bits["gpu_idle"] == 0x1
    assert len(set(bits.values())) == len(bits) and all(b & (b - 1) == 0 for b in bits.values())


def test_a_bad_entry_is_refused_with_its_name() -> None:
    raw = {"root": "toaster", "injected": False, "severity": "major", "action": "x", "prior": 0.1}
    with pytest.raises(registry.RegistryError, match=r"\[kinds.bad\].*root"):
        registry._kind("bad", raw)
    raw = {**raw, "root": "gpu", "prior_source": "llama3_psu", "needs": ["gpu.NO_SUCH_FIELD"]}
    with pytest.raises(registry.RegistryError, match="NO_SUCH_FIELD"):
        registry._kind("bad", raw)


# ---------------------------------------------------------------------- one home


def _dict_literals_keyed_by(names: set[str], min_keys: int = 2) -> list[str]:
    found = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                if len(keys & names) >= min_keys:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_module_keeps_its_own_table_of_fault_kinds() -> None:
    # actions, severities, priors, signatures: a dict keyed by kind names is a second home
    assert _dict_literals_keyed_by(set(registry.KINDS)) == []


def test_no_module_defines_xids_or_clock_reason_bits() -> None:
    offenders = []
    for path in SOURCES:
        if path == ROOT / "vocab" / "registry.py":
            continue
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                bits = any(re.search(r"THERMAL|POWER_BRAKE|SLOWDOWN|IDLE|POWER_CAP", n) for n in names)
                if bits and isinstance(node.value.value, int):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Xid":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} builds an Xid")
    assert offenders == []


def _code_naming(kind: str) -> list[str]:
    """Modules whose code (not prose) names the kind: a string constant that is exactly it."""
    return sorted(
        str(p.relative_to(ROOT))
        for p in SOURCES
        if any(isinstance(n, ast.Constant) and n.value == kind for n in ast.walk(ast.parse(p.read_text())))
    )


def test_a_kind_is_named_in_the_registry_its_physics_and_its_signature_only() -> None:
    # adding a kind touches faults.toml, the generator's physics (telemetry_gen/effects.py) and
    # the engine's signatures (rca/); examples in help texts and docstrings, and the demo's
    # choice of faults to show, aside
    for kind in registry.INJECTED:
        elsewhere = [
            m for m in _code_naming(kind) if m != "telemetry_gen/effects.py" and not m.startswith(("rca/", "aiops/"))
        ]
        assert elsewhere == [], kind
    rack = sorted(str(p.relative_to(ROOT)) for p in SOURCES if "rack_cooling" in p.read_text())
    assert rack == ["rca/symptoms.py", "telemetry_gen/effects.py"]
