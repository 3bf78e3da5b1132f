"""The fault and signal registry, read from faults.toml: per fault kind, its root, severity,
actions, ranking prior (with its source), signature and the telemetry its detection needs; per
XID, its meaning, class and action; per clock-event reason, its bit.

The data lives in faults.toml so that changing a kind's action, severity or prior is one edit in
one file; this module only loads and checks it. Every stage reads it, the generator included.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any

from vocab.catalog import MEASUREMENT_BY_NAME

SEVERITIES = ("critical", "major", "minor")
XID_CLASSES = ("hardware", "application", "driver", "memory", "fabric", "unknown")
COVERAGES = ("", "cables", "node_gpus", "rack_nodes")
ROOT_KINDS = ("gpu", "nic", "optic", "leaf", "spine", "switch", "psu", "cooling", "node")


class RegistryError(ValueError):
    """faults.toml says something inconsistent; the message names the entry."""


@dataclass(frozen=True, slots=True)
class FaultKind:
    name: str
    root: str
    injected: bool
    severity: str
    action: str
    warning_action: str | None
    prior: float
    prior_source: str
    signature: frozenset[str]
    signature_weight: float
    coverage: str
    needs: tuple[str, ...]
    precursor: bool
    warning_threshold: float | None
    evidence: tuple[str, ...]  # predictor features its model may read; () = all of its root's
    balanced_classes: bool  # its classifier is fitted with its classes weighted balanced
    kills_job: bool
    under_load: bool
    duration_s: tuple[float, float]
    generator_weight: float


@dataclass(frozen=True, slots=True)
class Xid:
    code: int
    meaning: str
    xid_class: str
    severity: str
    action: str
    suggests: str  # the fault kind it most often points to
    mnemonic: str = ""
    in_catalog: bool = False  # listed in NVIDIA's table (xid_catalog.tsv)
    used: bool = True  # not "Unused" there (seen on A100/H100/B100/GB200)
    # (count, window_s): an alarm only when seen this often on one GPU; None: an alarm at once
    repeat: tuple[int, float] | None = None
    cancels: int | None = None  # the Xid it undoes (seen after it, that one is no alarm)


@dataclass(frozen=True, slots=True)
class EarlySign:
    family: str
    kind: str
    action: str


def _load() -> dict[str, Any]:
    return tomllib.loads(resources.files("vocab").joinpath("faults.toml").read_text(encoding="utf-8"))


_RAW = _load()
_DEFAULTS: dict[str, str] = _RAW["defaults"]
_PRIOR_SOURCES: dict[str, str] = _RAW["prior_sources"]


def _kind(name: str, raw: dict[str, Any]) -> FaultKind:
    def fail(why: str) -> RegistryError:
        return RegistryError(f"faults.toml [kinds.{name}]: {why}")

    if raw.get("root") not in ROOT_KINDS:
        raise fail(f"root {raw.get('root')!r} is not one of {ROOT_KINDS}")
    if raw.get("severity") not in SEVERITIES:
        raise fail(f"severity {raw.get('severity')!r} is not one of {SEVERITIES}")
    if raw.get("coverage", "") not in COVERAGES:
        raise fail(f"coverage {raw.get('coverage')!r} is not one of {COVERAGES}")
    source = _PRIOR_SOURCES.get(raw.get("prior_source", ""), "")
    if not source:
        raise fail("prior_source must name an entry of [prior_sources]")
    for need in raw.get("needs", []):
        measurement, sep, field = need.partition("#") if "#" in need else need.partition(".")
        m = MEASUREMENT_BY_NAME.get(measurement)
        known = m is not None and (field in m.tag_keys if sep == "#" else m.metric(field) is not None)
        if not known:
            raise fail(f"needs {need!r}, which the metric catalog does not define")
    injected = bool(raw["injected"])
    if injected and ("duration_s" not in raw or "generator_weight" not in raw):
        raise fail("an injected kind needs duration_s and generator_weight")
    lo, hi = raw.get("duration_s", (0.0, 0.0))
    return FaultKind(
        name=name,
        root=raw["root"],
        injected=injected,
        severity=raw["severity"],
        action=raw["action"],
        warning_action=raw.get("warning_action"),
        prior=float(raw["prior"]),
        prior_source=source,
        signature=frozenset(raw.get("signature", [])),
        signature_weight=float(raw.get("signature_weight", 0.0)),
        coverage=raw.get("coverage", ""),
        needs=tuple(raw.get("needs", [])),
        precursor=bool(raw.get("precursor", False)),
        warning_threshold=None if "warning_threshold" not in raw else float(raw["warning_threshold"]),
        evidence=tuple(raw.get("evidence", ())),
        balanced_classes=bool(raw.get("balanced_classes", False)),
        kills_job=bool(raw.get("kills_job", False)),
        under_load=bool(raw.get("under_load", False)),
        duration_s=(float(lo), float(hi)),
        generator_weight=float(raw.get("generator_weight", 0.0)),
    )


def _xid(code: str, raw: dict[str, Any], actions: dict[str, str]) -> Xid:
    action = raw["action"]
    if action.startswith("@"):
        action = actions[action[1:]]
    if raw["class"] not in XID_CLASSES:
        raise RegistryError(f"faults.toml [xids.{code}]: class {raw['class']!r} is not one of {XID_CLASSES}")
    return Xid(int(code), raw["meaning"], raw["class"], raw["severity"], action, raw["suggests"])


KINDS: dict[str, FaultKind] = {name: _kind(name, raw) for name, raw in _RAW["kinds"].items()}
INJECTED: tuple[str, ...] = tuple(k for k, v in KINDS.items() if v.injected)
ENGINE_ONLY: tuple[str, ...] = tuple(k for k, v in KINDS.items() if not v.injected)
PRIOR: dict[str, float] = {k: v.prior for k, v in KINDS.items()}
UNKNOWN_ACTION: str = _DEFAULTS["unknown_action"]
PREDICTION_FALLBACK_ACTION: str = _DEFAULTS["prediction_action"]
DEFAULT_SEVERITY: str = _DEFAULTS["severity"]

EARLY_SIGNS: dict[str, EarlySign] = {
    family: EarlySign(family, raw["kind"], raw["action"]) for family, raw in _RAW["early_signs"].items()
}


_CLASS_SUGGESTS: dict[str, str] = dict(_RAW["xid_class_suggests"])


def _catalog_xids(hand: dict[int, Xid]) -> dict[int, Xid]:
    """Every Xid of NVIDIA's catalog: what faults.toml says of it (by hand, for the ones the
    engine has long known) or what the catalog's columns say (vocab/xid_catalog.py), with the
    catalog's mnemonic, whether it is used, and when it is an alarm."""
    from vocab import xid_catalog as cat

    out: dict[int, Xid] = {}
    for code, row in cat.rows().items():
        klass = cat.xid_class(row)
        repeat = cat.CATALOG_REPEAT.get(code) or (
            (cat.REPEAT_COUNT, cat.REPEAT_WINDOW_S) if cat.informational(row) else None
        )
        base = hand.get(code)
        out[code] = Xid(
            code,
            base.meaning if base else cat.meaning(row),
            # the catalog's class, but what the engine has long treated as the job's stays the job's
            base.xid_class if base is not None and base.xid_class == "application" else klass,
            base.severity if base else cat.severity(row),
            base.action if base else cat.action(row),
            base.suggests if base else _CLASS_SUGGESTS.get(klass, _CLASS_SUGGESTS["other"]),
            mnemonic=row.mnemonic,
            in_catalog=True,
            used=row.used,
            # the Xids known by hand keep alarming as they always have; the rest as the catalog says
            repeat=None if base is not None else repeat,
            cancels=cat.CANCELS.get(code),
        )
    for code, x in hand.items():  # known by hand and not in the table: kept as they are
        out.setdefault(code, x)
    return dict(sorted(out.items()))


UNKNOWN_XID_ACTION = "an Xid NVIDIA's catalog does not list: collect nvidia-bug-report, reset the GPU, watch it"
XIDS: dict[int, Xid] = _catalog_xids({int(c): _xid(c, raw, _RAW["actions"]) for c, raw in _RAW["xids"].items()})
CLOCK_EVENT_REASONS: dict[str, int] = dict(_RAW["clock_event_reasons"])

for _sign in EARLY_SIGNS.values():
    if _sign.kind not in KINDS:
        raise RegistryError(f"faults.toml [early_signs.{_sign.family}]: unknown kind {_sign.kind!r}")


def kind(name: str) -> FaultKind:
    return KINDS[name]


def action(name: str) -> str:
    """The recommended action once a fault of this kind is under way."""
    k = KINDS.get(name)
    return k.action if k else UNKNOWN_ACTION


def warning_action(name: str) -> str:
    """The recommended action when a fault of this kind is predicted."""
    k = KINDS.get(name)
    return k.warning_action if k and k.warning_action else PREDICTION_FALLBACK_ACTION


def severity(name: str) -> str:
    k = KINDS.get(name)
    return k.severity if k else DEFAULT_SEVERITY


def warning_thresholds() -> dict[str, float]:
    """Precursor kind -> the predicted probability at which a warning of it is raised (the kinds
    that set one; the predictor's own default for the rest)."""
    return {k.name: k.warning_threshold for k in KINDS.values() if k.warning_threshold is not None}


def precursor_evidence() -> dict[str, tuple[str, ...]]:
    """Precursor kind -> the predictor features its model may read (the kinds that name them;
    the rest read every feature of their root)."""
    return {k.name: k.evidence for k in KINDS.values() if k.evidence}


def balanced_classes() -> frozenset[str]:
    """Precursor kinds whose classifier is fitted with its classes weighted balanced."""
    return frozenset(k.name for k in KINDS.values() if k.balanced_classes)


def predictable_by_root() -> dict[str, tuple[str, ...]]:
    """Root entity kind -> the kinds that announce themselves there (what a predictor learns)."""
    out: dict[str, tuple[str, ...]] = {}
    for k in KINDS.values():
        if k.precursor:
            out[k.root] = (*out.get(k.root, ()), k.name)
    return out


def describe_xid(code: int) -> Xid:
    """An XID as the registry knows it; a code NVIDIA's catalog does not list is an unknown
    fault of the GPU (kind gpu_fault), never dropped."""
    found = XIDS.get(code)
    if found is not None:
        return found
    d = _RAW["xid_defaults"]
    return Xid(code, f"unknown XID {code}", "unknown", d["severity"], UNKNOWN_XID_ACTION, "gpu_fault")


def clock_reason(name: str) -> int:
    return CLOCK_EVENT_REASONS[name]


__all__ = [
    "CLOCK_EVENT_REASONS",
    "EARLY_SIGNS",
    "ENGINE_ONLY",
    "INJECTED",
    "KINDS",
    "PRIOR",
    "XIDS",
    "EarlySign",
    "FaultKind",
    "RegistryError",
    "Xid",
    "action",
    "balanced_classes",
    "clock_reason",
    "describe_xid",
    "kind",
    "predictable_by_root",
    "severity",
    "warning_action",
    "warning_thresholds",
]
