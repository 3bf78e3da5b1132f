"""The GPU fields operators look at first each have a panel (issue 49, point 6): framebuffer
memory, tensor activity, NVLink bandwidth (as a rate, the field is a counter), the memory clock,
the PCIe link against its maximum, and the clock event reasons named from the catalog's bits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vocab.catalog import MetricKind, measurement
from vocab.registry import CLOCK_EVENT_REASONS

GPUS = Path(__file__).resolve().parents[2] / "dashboards" / "json" / "gpus.json"


def _panels() -> list[dict[str, Any]]:
    return list(json.loads(GPUS.read_text())["panels"])


def _panel_reading(field: str) -> dict[str, Any]:
    found = [p for p in _panels() if any(f'"{field}"' in t.get("query", "") for t in p.get("targets", []))]
    assert found, f"no panel reads {field}"
    return found[0]


@pytest.mark.parametrize(
    "field",
    [
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_PCIE_LINK_GEN",
        "DCGM_FI_DEV_PCIE_MAX_LINK_GEN",
        "DCGM_FI_DEV_PCIE_LINK_WIDTH",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    ],
)
def test_a_panel_reads_the_field_by_its_meaning(field: str) -> None:
    panel = _panel_reading(field)
    gpu = measurement("gpu")
    metric = gpu.metric(field) if gpu is not None else None
    assert metric is not None, field
    query = next(t["query"] for t in panel["targets"] if f'"{field}"' in t["query"])
    if metric.kind is MetricKind.COUNTER:  # a counter is drawn as its rate
        assert "non_negative_derivative(" in query and ", 1s)" in query
    assert panel.get("description"), field


def test_clock_event_reasons_are_named_from_the_catalog() -> None:
    panel = _panel_reading("DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
    assert panel["type"] == "state-timeline"
    named = {k: v["text"] for m in panel["fieldConfig"]["defaults"]["mappings"] for k, v in m["options"].items()}
    assert {str(bit): name for name, bit in CLOCK_EVENT_REASONS.items()} == {k: v for k, v in named.items() if k != "0"}
