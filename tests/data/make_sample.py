"""Writes sample.lp: a two-node cluster (16 GPUs), 30 ticks at 10 s, every measurement of the
catalog, then the kinds of bad input real exporters produce (after a comment line that says so).

Run from the repository root: python tests/data/make_sample.py. The output is committed so the
demo and the tests need nothing generated at run time; this script says how it was made.
"""

from __future__ import annotations

from pathlib import Path

from aiops.catalog import DCGM_INT64_BLANK
from aiops.sample_cluster import FlatCluster
from ingest.lineprotocol import encode

START_NS = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z
TICK_NS = 10 * 10**9
TICKS = 30
BAD_INPUT_MARKER = b"# the lines below are the bad input real exporters produce"


def main() -> None:
    cluster = FlatCluster(gpus=16, seed=7)
    good = b"".join(encode(cluster.tick(START_NS + t * TICK_NS)) for t in range(TICKS))
    after = str(START_NS + TICKS * TICK_NS).encode()
    bad = [
        BAD_INPUT_MARKER + b"; each must be dead-lettered with a reason or masked",
        b"gpu,gpu=n00000-gpu0,node=n00000 DCGM_FI_DEV_GPU_TEMP=hot " + after,
        b"gpu,gpu=n00000-gpu1,node=n00000 " + after,
        b"gpu,gpu=n00000-gpu2,node=n00000 DCGM_FI_DEV_FB_USED=" + str(DCGM_INT64_BLANK).encode() + b"i " + after,
        b"mystery_device,id=x1 temp=1 " + after,
        b"nic,nic=n00000-nic0,node=n00000,rail=0 symbol_error=12i 99999999999999999999",
        b"gpu,gpu=n00000-gpu3,node=n00000 DCGM_FI_DEV_GPU_TEMP=44.5 " + str(START_NS).encode(),
    ]
    Path(__file__).with_name("sample.lp").write_bytes(good + b"\n".join(bad) + b"\n")


if __name__ == "__main__":
    main()
