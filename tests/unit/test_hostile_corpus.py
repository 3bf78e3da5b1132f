"""The hostile-input corpus (tests/data/hostile/, each file's attack in MANIFEST.tsv) through
every door: the line-protocol decoder, every importer (ibnetdiscover, LLDP, inventory CSV,
NetBox, Slurm JSON, Kubernetes JSON), the events reader, the checkpoint loader, the incident
pages and every chat format.

It runs in a child process under an address-space limit, so a door that grows without bound
fails here as a MemoryError report, not by taking the machine down. Each file must come back
refused, dead-lettered, reported as findings or shown as inert text, with a message that names
what was wrong on one line; never a traceback, never taken as good."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from tests.hostile_corpus import DOORS, HOSTILE, manifest

ROOT = Path(__file__).resolve().parents[2]
# The child imports numpy, pandas, scikit-learn and the whole service (about 1.5 GB of address
# space, most of it mapped, not used); 4 GiB leaves room for every door's honest work and stops
# the attacks of record (an inventory that grew to 21 GB, a host list into a MemoryError) early.
ADDRESS_SPACE_LIMIT = 4 << 30


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))


def test_every_hostile_file_is_refused_or_kept_inert_with_a_clear_message_under_a_memory_limit() -> None:
    rows = manifest()
    listed = {path for path, _, _ in rows}
    on_disk = {str(p.relative_to(HOSTILE)) for p in HOSTILE.rglob("*") if p.is_file() and p.name != "MANIFEST.tsv"}
    assert on_disk == listed, (
        f"files without a MANIFEST row: {on_disk - listed}; rows without a file: {listed - on_disk}"
    )
    assert {door for _, door, _ in rows} == set(DOORS), "a door with no corpus, or a corpus with no door"
    assert all(what.strip() for _, _, what in rows), "each file says what it attacks"

    done = subprocess.run(
        [sys.executable, "-m", "tests.hostile_corpus"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        preexec_fn=_limited,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert {r["path"] for r in results} == listed - {"checkpoint/numpy-load-inner.pickle"}
    bad = [r for r in results if r["outcome"] not in ("refused", "dead-lettered", "findings", "inert")]
    assert not bad, "\n".join(f"{r['path']} ({r['door']}): {r['outcome']}: {r['message']}" for r in bad)
    for r in results:
        assert r["message"] and "Traceback" not in r["message"], r
        if r["outcome"] == "refused" and r["door"] not in ("checkpoint",):
            assert "\n" not in r["message"], r  # one line, naming the file and the place
            assert str(HOSTILE / r["path"]) in r["message"] or r["path"].split("/")[-1] in r["message"], r
