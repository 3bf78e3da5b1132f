"""The generator's collector options (clock offsets, jitter, 1 s precision, no job tag,
single-field lines) and meta.json: they change only the line protocol, never the cluster."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from ingest.frames import Column, Frame
from ingest.lineprotocol import decode, encode, encode_heads, lines_to_bytes
from telemetry_gen.collector import _single_field
from telemetry_gen.emit import messages_from_lines, write_folder
from telemetry_gen.generator import GenConfig, Generation
from telemetry_gen.simulate import T0
from vocab.catalog import FieldType, measurement

BASE = GenConfig(realism="clean", gpus=64, hours=1.0, interval=60.0, seed=3, faults="gpu_fell_off_bus=1,psu_failure=1")
NS = 1_000_000_000
ALL_ON = {"clock_offset_s": 5.0, "jitter_s": 2.0, "truncate_s": True, "job_tags": False, "single_field": True}
ALL_OFF = {"clock_offset_s": 0.0, "jitter_s": 0.0, "truncate_s": False, "job_tags": True, "single_field": False}
# the tag that names each measurement's host: a node and all it reports, a switch, a cooling loop
HOST_TAG = {"switch": "switch", "switch_port": "switch", "cooling": "cooling"}

Folder = Callable[..., Path]


def config(**options: Any) -> GenConfig:
    return replace(BASE, **options)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Folder:
    """write_folder output for the base config with some collector options, made once each."""
    made: dict[tuple[tuple[str, object], ...], Path] = {}

    def make(**options: Any) -> Path:
        key = tuple(sorted(options.items()))
        if key not in made:
            out = tmp_path_factory.mktemp("gen")
            write_folder(Generation(config(**options)), out)
            made[key] = out
        return made[key]

    return make


def stamps(out: Path) -> pd.DataFrame:
    """Every decoded line's host, tick (event time, ns) and timestamp."""
    decoded = decode((out / "telemetry.lp").read_bytes())
    assert decoded.rejects == []
    parts = []
    for name, frame in decoded.frames.items():
        host = frame.tag(HOST_TAG.get(name, "node"))
        assert (host != "").all()
        parts.append(pd.DataFrame({"host": host, "time": frame.time_ns}))
    df = pd.concat(parts, ignore_index=True)
    interval = int(BASE.interval * NS)
    df["tick"] = int(T0 * NS) + (df["time"] - int(T0 * NS)) // interval * interval
    df["delta"] = df["time"] - df["tick"]
    return df


def samples(out: Path) -> pd.DataFrame:
    """Every decoded sample as (measurement, entity, time, field, type, value), sorted."""
    decoded = decode((out / "telemetry.lp").read_bytes())
    assert decoded.rejects == []
    return _samples(decoded.frames)


def _samples(frames: dict[str, Frame]) -> pd.DataFrame:
    parts = []
    for name, frame in frames.items():
        spec = measurement(name)
        entity = frame.tag(spec.id_tag if spec is not None else "id")
        for field, col in frame.fields.items():
            rows = np.flatnonzero(col.present)
            parts.append(
                pd.DataFrame(
                    {
                        "measurement": name,
                        "entity": entity[rows],
                        "time": frame.time_ns[rows],
                        "field": field,
                        "type": col.type.name,
                        "value": col.values[rows].astype(object),
                    }
                )
            )
    df = pd.concat(parts, ignore_index=True)
    return df.sort_values(["measurement", "entity", "time", "field"], ignore_index=True)


# ---------------------------------------------------------------- off by default, cluster unchanged


def test_defaults_encode_the_clean_frames_exactly(folder: Folder) -> None:
    """Options off: the same bytes as encoding the simulated frames directly (as before)."""
    gen = Generation(BASE)
    expected = b"".join(encode(tick.frames) for tick in gen.ticks())
    assert (folder() / "telemetry.lp").read_bytes() == expected
    assert (folder(**ALL_OFF) / "telemetry.lp").read_bytes() == expected


def test_options_change_neither_truth_nor_events_nor_the_in_process_frames(folder: Folder) -> None:
    for name in ("truth.jsonl", "events.jsonl", "topology.json"):
        assert (folder(**ALL_ON) / name).read_bytes() == (folder() / name).read_bytes()
    clean = Generation(BASE)
    collected = Generation(config(**ALL_ON))
    for a, b in zip(clean.ticks(), collected.ticks(), strict=True):
        assert encode(a.frames) == encode(b.frames)  # detectors fed in-process see the clean cluster
    assert clean.truth() == collected.truth()


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="clock_offset_s"):
        Generation(config(clock_offset_s=-1.0))
    with pytest.raises(ValueError, match="jitter_s"):
        Generation(config(jitter_s=float("nan")))


# ---------------------------------------------------------------- clocks


def test_clock_offsets_are_constant_per_host_and_within_bounds(folder: Folder) -> None:
    df = stamps(folder(clock_offset_s=5.0))
    per_host = df.groupby("host")["delta"]
    assert (per_host.nunique() == 1).all()  # every line of a host, every tick, the same offset
    offsets = per_host.first()
    assert offsets.min() >= 0 and offsets.max() <= 5 * NS
    assert offsets.nunique() == len(offsets) and offsets.max() - offsets.min() > 3 * NS  # hosts disagree
    switches, loops = offsets.filter(like="leaf"), offsets.filter(like="-cdu")
    assert len(switches) and len(loops)  # switches and cooling loops are hosts of their own


def test_jitter_is_per_host_and_tick_and_within_bounds(folder: Folder) -> None:
    df = stamps(folder(jitter_s=3.0))
    per_tick = df.groupby(["host", "tick"])["delta"]
    assert (per_tick.nunique() == 1).all()  # one host's lines in one tick share their jitter
    jitter = per_tick.first()
    assert jitter.min() >= 0 and jitter.max() <= 3 * NS
    assert (jitter.groupby(level="host").nunique() > 1).all()  # and it changes from tick to tick


def test_offsets_and_jitter_add_up_and_encoding_twice_stamps_the_same(folder: Folder) -> None:
    offset = stamps(folder(clock_offset_s=5.0))["delta"]
    jitter = stamps(folder(jitter_s=2.0))["delta"]
    both = stamps(folder(clock_offset_s=5.0, jitter_s=2.0))["delta"]
    assert (both - (offset + jitter)).abs().max() <= 1  # (each rounded to whole ns)
    gen = Generation(config(clock_offset_s=5.0, jitter_s=2.0))
    tick = next(gen.ticks())
    assert all(a.lines.equals(b.lines) for a, b in zip(gen.lines(tick), gen.lines(tick), strict=True))


def test_truncation_gives_whole_seconds_and_one_timestamp_per_host_and_tick(folder: Folder) -> None:
    exact = stamps(folder(clock_offset_s=5.0, jitter_s=2.0))
    truncated = stamps(folder(clock_offset_s=5.0, jitter_s=2.0, truncate_s=True))
    assert (truncated["time"] % NS == 0).all()
    assert (truncated.groupby(["host", "tick"])["time"].nunique() == 1).all()
    assert (truncated["time"] == exact["time"] // NS * NS).all()  # truncated, not rounded
    assert (exact["time"] % NS != 0).mean() > 0.99  # (so the check above has something to truncate)


# ---------------------------------------------------------------- tags and lines


def test_without_job_tags_gpu_lines_lose_exactly_their_job_tag(folder: Folder) -> None:
    with_jobs = (folder() / "telemetry.lp").read_bytes()
    without = (folder(job_tags=False) / "telemetry.lp").read_bytes()
    assert b"job=" in with_jobs and b"job=" not in without
    assert re.sub(rb",job=[^ ,]+", b"", with_jobs) == without
    assert "job" not in decode(without).frames["gpu"].tags


def test_single_field_lines_carry_exactly_the_samples_of_the_multi_field_lines(folder: Folder) -> None:
    # (a quarter of an hour: ~75 shapes of line are more than the decoder's fast path takes at once)
    multi = folder(hours=0.25, clock_offset_s=5.0, jitter_s=2.0)
    single = folder(hours=0.25, clock_offset_s=5.0, jitter_s=2.0, single_field=True)
    expected = samples(multi)
    assert samples(single).equals(expected)
    lines = (single / "telemetry.lp").read_bytes().splitlines()
    assert len(lines) == len(expected)  # one line per sample
    first = [line.rsplit(b" ", 2) for line in lines[:19]]  # the first GPU's samples, together
    assert len({(head, stamp) for head, _, stamp in first}) == 1
    assert [pair.split(b"=")[0] for _, pair, _ in first][:2] == [b"DCGM_FI_DEV_GPU_TEMP", b"DCGM_FI_DEV_MEMORY_TEMP"]


def test_single_field_lines_of_fields_that_need_escaping_match_the_encoder() -> None:
    """The general path (keys to escape, strings, non-plain types) against the reference encoder."""
    frame = Frame(
        "gpu",
        np.array([10, 10, 20], dtype=np.int64),
        {"gpu": np.array(["a", "b c", "d"], dtype=object)},
        {
            "plain": Column(FieldType.FLOAT, np.array([1.5, 0.0, 2.0]), np.array([True, False, True])),
            "needs escaping": Column.of(FieldType.INT, [1, 2, 3]),
            "note": Column.of(FieldType.STRING, ['x "y"', "z,w", "v"]),
            "ok": Column.of(FieldType.BOOL, [True, False, True]),
        },
    )
    encoded = _single_field(encode_heads("gpu", frame.tags, len(frame)), frame)
    assert encoded.rows is not None and encoded.rows.tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2]
    data = lines_to_bytes(encoded.lines)
    assert _samples(decode(data).frames).equals(_samples(decode(encode([frame])).frames))


def test_kafka_messages_keep_each_hosts_single_field_lines_on_its_partition() -> None:
    gen = Generation(config(single_field=True, clock_offset_s=5.0))
    tick = next(gen.ticks())
    encoded = gen.lines(tick)
    sent = 0
    for message in messages_from_lines(encoded):
        assert message.key is not None
        for name, frame in decode(message.value).frames.items():
            spec = measurement(name)
            assert spec is not None
            assert set(frame.tag(spec.partition_tag)) == {message.key.decode()}
        sent += message.value.count(b"\n") + 1
    assert sent == sum(len(e.lines) for e in encoded)


# ---------------------------------------------------------------- meta.json


def test_meta_json_records_the_run_and_the_collector(folder: Folder) -> None:
    meta = json.loads((folder(**ALL_ON) / "meta.json").read_text())
    assert meta["interval_s"] == 60.0
    assert meta["start"] == T0 and meta["end"] == T0 + 3600  # event time, Unix seconds
    assert (meta["seed"], meta["gpus"], meta["topology"]) == (3, 64, "fat-tree")
    assert meta["collector"] == ALL_ON
    assert meta["realism"] == "clean"
    assert json.loads((folder() / "meta.json").read_text())["collector"] == ALL_OFF
