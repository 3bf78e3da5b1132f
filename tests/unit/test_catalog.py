"""The metric catalog is the wire format's single source of truth; the docs are rendered from it."""

from __future__ import annotations

from tests.conftest import ROOT
from vocab.catalog import MEASUREMENTS, MetricKind, render_markdown


def test_docs_metrics_md_is_the_rendered_catalog() -> None:
    rendered = (ROOT / "docs" / "metrics.md").read_text()
    assert rendered.strip() == render_markdown().strip(), "run: aiops catalog --markdown > docs/metrics.md"


def test_names_are_unique_and_ids_are_tags() -> None:
    assert len({m.name for m in MEASUREMENTS}) == len(MEASUREMENTS)
    for m in MEASUREMENTS:
        assert m.tag_keys[0] == m.id_tag
        assert m.partition_tag in m.tag_keys or m.partition_tag == m.id_tag
        names = [x.name for x in m.metrics]
        assert len(set(names)) == len(names), m.name
        assert not set(names) & set(m.tag_keys), m.name


def test_design_vocabulary_is_present() -> None:
    fields = {(m.name, x.name): x for m in MEASUREMENTS for x in m.metrics}
    for name in (
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    ):
        assert ("gpu", name) in fields
    for name in (
        "symbol_error",
        "port_rcv_errors",
        "link_downed",
        "port_xmit_wait",
        "port_xmit_discards",
        "rx_prio3_pause",
        "tx_prio3_pause",
        "np_cnp_sent",
        "port_xmit_data",
        "port_rcv_data",
    ):
        assert ("nic", name) in fields
        assert fields["nic", name].kind is MetricKind.COUNTER
    for name in ("rx_power_dbm", "tx_power_dbm", "temperature_c"):
        assert ("optic", name) in fields
