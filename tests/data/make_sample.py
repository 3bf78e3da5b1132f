"""Writes sample.lp: a tiny two-node cluster, 30 ticks at 10 s, every measurement of the catalog,
plus the kinds of bad input real exporters produce (kept at the end, each with a comment).

Run from the repository root: python tests/data/make_sample.py. The output is committed so the
demo and the tests need nothing generated at run time; the script says how it was made.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from aiops.catalog import DCGM_INT64_BLANK, MEASUREMENTS, FieldType, MetricKind
from ingest.frames import Column, Frame
from ingest.lineprotocol import encode

START_NS = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z
TICK_NS = 10 * 10**9
NODES = ("n0001", "n0002")

PER_NODE = {"gpu": 8, "nvswitch": 4, "nic": 8, "optic": 8, "node": 1, "psu": 2}
SWITCHES = ("leaf-p0-r0", "leaf-p0-r1", "spine-0")
RACK = "rack00"


def entity_tags(name: str) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    if name in PER_NODE:
        for node in NODES:
            for i in range(PER_NODE[name]):
                tags = {"node": node}
                if name == "gpu":
                    tags |= {"gpu": f"{node}-gpu{i}", "job": "job-0001"}
                elif name == "nvswitch":
                    tags |= {"nvswitch": f"{node}-nvsw{i}"}
                elif name == "nic":
                    tags |= {"nic": f"{node}-nic{i}", "rail": str(i)}
                elif name == "optic":
                    tags |= {"optic": f"{node}-nic{i}-optic", "nic": f"{node}-nic{i}"}
                elif name == "node":
                    tags |= {"rack": RACK}
                elif name == "psu":
                    tags |= {"psu": f"{node}-psu{i}"}
                rows.append(tags)
    elif name == "switch":
        rows = [{"switch": s, "role": s.split("-")[0]} for s in SWITCHES]
    elif name == "switch_port":
        rows = [{"port": f"{s}:p{p}", "switch": s, "peer": f"{NODES[p % 2]}-nic{p}"} for s in SWITCHES[:2] for p in range(4)]
    elif name == "cooling":
        rows = [{"cooling": f"{RACK}-cdu", "rack": RACK}]
    return rows


GAUGE_LEVEL = {"°C": 45.0, "W": 350.0, "MHz": 1800.0, "%": 80.0, "ratio": 0.6, "MiB": 60000.0, "dBm": -2.0,
               "mA": 8.0, "V": 230.0, "rpm": 9000.0, "l/min": 30.0, "ports": 64.0}


def main() -> None:
    rng = np.random.default_rng(7)
    frames: list[Frame] = []
    for tick in range(30):
        for m in MEASUREMENTS:
            rows = entity_tags(m.name)
            n = len(rows)
            tags = {k: np.array([r.get(k, "") for r in rows], dtype=object) for k in m.tag_keys}
            fields: dict[str, Column] = {}
            for metric in m.metrics:
                if metric.kind is MetricKind.COUNTER:
                    values = np.full(n, 1000 * (tick + 1)) + np.arange(n)
                elif metric.kind is MetricKind.STATE:
                    values = np.ones(n) if metric.name in ("link_state", "status") else np.zeros(n)
                else:
                    level = GAUGE_LEVEL.get(metric.unit, 10.0)
                    values = level + rng.normal(0, abs(level) * 0.02, n)
                if metric.type is FieldType.FLOAT:
                    fields[metric.name] = Column.of(FieldType.FLOAT, np.round(values, 3))
                else:
                    fields[metric.name] = Column.of(metric.type, values.astype(np.int64))
            frames.append(Frame(m.name, np.full(n, START_NS + tick * TICK_NS, dtype=np.int64), tags, fields))
    bad = [
        b"# the lines below are the bad input real exporters produce; each must be dead-lettered or masked",
        b"gpu,gpu=n0001-gpu0,node=n0001 DCGM_FI_DEV_GPU_TEMP=hot " + str(START_NS + 30 * TICK_NS).encode(),
        b"gpu,gpu=n0001-gpu1,node=n0001 " + str(START_NS + 30 * TICK_NS).encode(),
        b"gpu,gpu=n0001-gpu2,node=n0001 DCGM_FI_DEV_FB_USED=" + str(DCGM_INT64_BLANK).encode() + b"i "
        + str(START_NS + 30 * TICK_NS).encode(),
        b"mystery_device,id=x1 temp=1 " + str(START_NS + 30 * TICK_NS).encode(),
        b"nic,nic=n0001-nic0,node=n0001,rail=0 symbol_error=12i 99999999999999999999",
    ]
    out = Path(__file__).with_name("sample.lp")
    out.write_bytes(encode(frames) + b"\n".join(bad) + b"\n")


if __name__ == "__main__":
    main()
