"""Writes sample.lp: a two-node cluster (16 GPUs) from the telemetry generator, 30 ticks at 10 s,
no faults, then the kinds of bad input real exporters produce (after a comment line that says so).

Run from the repository root: python tests/data/make_sample.py. The output is committed so the
demo and the tests need nothing generated at run time; this script says how it was made.
"""

from __future__ import annotations

from pathlib import Path

from ingest.lineprotocol import encode
from telemetry_gen.generator import GenConfig, Generation
from telemetry_gen.simulate import T0
from vocab.catalog import DCGM_INT64_BLANK

TICKS = 30
TICK_S = 10
BAD_INPUT_MARKER = b"# the lines below are the bad input real exporters produce"


def main() -> None:
    gen = Generation(
        GenConfig(realism="clean", gpus=16, hours=TICKS * TICK_S / 3600, interval=TICK_S, seed=7, faults="")
    )
    good = b"".join(encode(tick.frames) for tick in gen.ticks())
    start = int(T0) * 10**9
    after = str(start + TICKS * TICK_S * 10**9).encode()
    bad = [
        BAD_INPUT_MARKER + b"; each must be dead-lettered with a reason or masked",
        b"gpu,gpu=n00000-gpu0,node=n00000 DCGM_FI_DEV_GPU_TEMP=hot " + after,
        b"gpu,gpu=n00000-gpu1,node=n00000 " + after,
        b"gpu,gpu=n00000-gpu2,node=n00000 DCGM_FI_DEV_FB_USED=" + str(DCGM_INT64_BLANK).encode() + b"i " + after,
        b"mystery_device,id=x1 temp=1 " + after,
        b"nic,nic=n00000-nic0,node=n00000,rail=0 symbol_error=12i 99999999999999999999",
        # two days behind the stream: outside the lateness bound (a late point inside it is stored)
        b"gpu,gpu=n00000-gpu3,node=n00000 DCGM_FI_DEV_GPU_TEMP=44.5 " + str(start - 2 * 86_400 * 10**9).encode(),
    ]
    Path(__file__).with_name("sample.lp").write_bytes(good + b"\n".join(bad) + b"\n")


if __name__ == "__main__":
    main()
