"""Catalog validation, DCGM sentinels and per-entity event-time order."""

from __future__ import annotations

import numpy as np
import pytest

from ingest.deadletter import DeadLetter, Source
from ingest.lineprotocol import decode
from ingest.pipeline import IngestCore
from ingest.validate import Validated, Validator
from vocab.catalog import DCGM_FP64_BLANK, DCGM_INT32_BLANK, DCGM_INT64_BLANK, FieldType
from vocab.entities import EntityIndex


def _validate(data: bytes, validator: Validator | None = None) -> tuple[Validator, Validated]:
    v = validator or Validator()
    return v, v(decode(data))


def test_unknown_measurement_and_missing_id_are_rejected_with_reasons() -> None:
    _, out = _validate(
        b"weird,id=1 x=1 1\ngpu,node=n1 DCGM_FI_DEV_GPU_TEMP=50 1\ngpu,gpu=g1 DCGM_FI_DEV_GPU_TEMP=50 1\n"
    )
    reasons = {r.line_no: r.reason for r in out.rejects}
    assert reasons == {0: "unknown measurement 'weird'", 1: "missing entity id tag 'gpu'"}
    assert list(out.frames["gpu"].tags["gpu"]) == ["g1"]


def test_numeric_types_are_converted_to_the_catalogs_and_text_is_rejected() -> None:
    v, out = _validate(b"gpu,gpu=g1 DCGM_FI_DEV_GPU_TEMP=50i,DCGM_FI_DEV_SM_CLOCK=1500 1\n")
    gpu = out.frames["gpu"]
    assert gpu.fields["DCGM_FI_DEV_GPU_TEMP"].type is FieldType.FLOAT
    assert gpu.fields["DCGM_FI_DEV_SM_CLOCK"].type is FieldType.INT
    assert gpu.fields["DCGM_FI_DEV_SM_CLOCK"].values[0] == 1500
    assert out.rejects == []
    _, text = _validate(b'gpu,gpu=g2 DCGM_FI_DEV_GPU_TEMP="hot" 2\n', v)
    assert [r.reason for r in text.rejects] == ["field 'DCGM_FI_DEV_GPU_TEMP' should be float, got string"]
    assert "gpu" not in text.frames


def test_fields_outside_the_catalog_are_kept_raw() -> None:
    _, out = _validate(b"gpu,gpu=g1 DCGM_FI_DEV_GPU_TEMP=50,vendor_extra=3i 1\n")
    assert "vendor_extra" in out.frames["gpu"].fields


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("DCGM_FI_DEV_SM_CLOCK", "9223372036854776000"),  # the int64 blank after a float conversion
        ("DCGM_FI_DEV_SM_CLOCK", "9.223372036854776e+18"),
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "9223372036854776000"),
        ("DCGM_FI_DEV_SM_CLOCK", "2147483632"),  # the int32 blank as a float
        ("DCGM_FI_DEV_XID_ERRORS", "9223372036854775792i"),
    ],
)
def test_blanks_survive_a_collector_s_float_conversion(field: str, value: str) -> None:
    _, out = _validate(f"gpu,gpu=g1 {field}={value},DCGM_FI_DEV_POWER_USAGE=300 1\n".encode())
    col = out.frames["gpu"].fields[field]
    assert not col.present[0] and out.sentinels_masked == 1
    assert col.values[0] >= 0  # never wrapped round to a huge negative reading


@pytest.mark.parametrize(
    ("field", "value", "masked"),
    [
        ("DCGM_FI_DEV_GPU_TEMP", f"{DCGM_FP64_BLANK}", True),
        ("DCGM_FI_DEV_SM_CLOCK", f"{DCGM_INT32_BLANK}i", True),
        ("DCGM_FI_DEV_SM_CLOCK", f"{DCGM_INT32_BLANK - 1}i", False),
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", f"{DCGM_INT64_BLANK}i", True),
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", f"{DCGM_INT32_BLANK}i", False),  # a big but real 64-bit count
    ],
)
def test_dcgm_blank_sentinels_become_missing(field: str, value: str, masked: bool) -> None:
    _, out = _validate(f"gpu,gpu=g1 {field}={value},DCGM_FI_DEV_POWER_USAGE=300 1\n".encode())
    col = out.frames["gpu"].fields[field]
    assert bool(col.present[0]) is not masked
    assert out.sentinels_masked == int(masked)


def test_rows_of_one_entity_and_time_are_kept_for_merging_not_dead_lettered() -> None:
    # Telegraf's metric_version = 2 writes one line per sample: all of them are the entity's data
    _, out = _validate(
        b"gpu,gpu=a DCGM_FI_DEV_GPU_TEMP=50 10\n"
        b"gpu,gpu=a DCGM_FI_DEV_SM_CLOCK=1980i 10\n"
        b"gpu,gpu=a DCGM_FI_DEV_GPU_TEMP=51 10\n"
        b"gpu,gpu=a DCGM_FI_DEV_GPU_TEMP=49 9\n"  # older than the entity's last: still stored
    )
    assert out.rejects == []
    assert len(out.frames["gpu"]) == 4


def test_points_outside_the_lateness_bound_are_dead_lettered_with_the_reason() -> None:
    hour = 3600 * 10**9
    t0 = 1_767_225_600 * 10**9
    v, first = _validate(
        f"gpu,gpu=a DCGM_FI_DEV_GPU_TEMP=50 {t0}\n"
        f"gpu,gpu=b DCGM_FI_DEV_GPU_TEMP=50 {t0}\n"
        f"gpu,gpu=c DCGM_FI_DEV_GPU_TEMP=50 {t0 + 200 * 365 * 24 * hour}\n".encode()  # a clock in 2226
    )
    assert [(r.line_no, r.stage) for r in first.rejects] == [(2, "lateness")]
    assert first.rejects[0].reason.startswith("outside the lateness bound: ")
    assert "ahead of the wall clock" in first.rejects[0].reason  # checked first: no clock runs ahead of now
    assert v.clock.watermark_ns == t0  # the broken clock did not move the stream
    _, second = _validate(
        f"gpu,gpu=a DCGM_FI_DEV_GPU_TEMP=50 {t0 - 2 * hour}\n"  # beyond the 1 h bound
        f"gpu,gpu=b DCGM_FI_DEV_GPU_TEMP=50 {t0 - hour // 2}\n"  # late, inside it: stored
        f"gpu,gpu=a DCGM_FI_DEV_GPU_TEMP=50 {t0 + 30 * 10**9}\n".encode(),
        v,
    )
    assert [(r.line_no, r.stage) for r in second.rejects] == [(0, "lateness")]
    assert "behind the stream's event time" in second.rejects[0].reason


def test_a_stream_resuming_after_a_long_outage_is_accepted() -> None:
    hour = 3600 * 10**9
    t0 = 1_767_225_600 * 10**9
    v, _ = _validate(f"gpu,gpu=a DCGM_FI_DEV_GPU_TEMP=50 {t0}\n".encode())
    lines = "".join(f"gpu,gpu=g{i} DCGM_FI_DEV_GPU_TEMP=50 {t0 + 5 * hour}\n" for i in range(4))
    _, later = _validate(lines.encode(), v)
    assert later.rejects == [] and len(later.frames["gpu"]) == 4


def test_one_batch_of_a_backlog_spanning_hours_of_several_measurements_is_kept_whole() -> None:
    """Catching up, one poll holds hours of a partition, each scrape a GPU line then a NIC line:
    the stream's clock moves through the batch in line order, so neither the early rows of the
    second measurement nor the late rows of the batch fall outside the bound."""
    t0 = 1_767_225_600 * 10**9
    scrapes = range(0, 4 * 3600, 30)  # four hours at 30 s
    lines = "".join(
        "".join(f"gpu,gpu=g{g} DCGM_FI_DEV_GPU_TEMP=50 {t0 + s * 10**9}\n" for g in range(20))
        + "".join(f"nic,nic=n{g} symbol_error=0i {t0 + s * 10**9}\n" for g in range(20))
        for s in scrapes
    )
    v, out = _validate(lines.encode())
    assert out.rejects == []
    assert len(out.frames["gpu"]) == len(out.frames["nic"]) == 20 * len(scrapes)
    assert v.clock.watermark_ns == t0 + scrapes[-1] * 10**9
    # a line from a clock two hours behind, in the middle of a later batch, is still caught
    later = [f"gpu,gpu=g{i} DCGM_FI_DEV_GPU_TEMP=50 {t0 + (4 * 3600 + i) * 10**9}\n" for i in range(2000)]
    later.insert(1000, f"gpu,gpu=x DCGM_FI_DEV_GPU_TEMP=50 {t0 + 2 * 3600 * 10**9 - 10**9}\n")
    _, out = _validate("".join(later).encode(), v)
    assert [r.stage for r in out.rejects] == ["lateness"] and len(out.frames["gpu"]) == 2000


def test_partitions_are_judged_against_their_own_event_time() -> None:
    """A partition read hours after another (the broker hands them out unevenly) is not behind."""
    t0 = 1_767_225_600 * 10**9
    v = Validator()
    ahead = decode(f"gpu,gpu=a DCGM_FI_DEV_GPU_TEMP=50 {t0 + 5 * 3600 * 10**9}\n".encode())
    behind = decode(f"gpu,gpu=b DCGM_FI_DEV_GPU_TEMP=50 {t0}\n".encode())
    assert v(ahead, stream=("t", 0)).rejects == []
    assert v(behind, stream=("t", 1)).rejects == []
    assert v(behind, stream=("t", 0)).rejects != []  # the same row, five hours behind its own partition


def test_entity_index_is_stable_and_vectorised() -> None:
    index = EntityIndex()
    first = index.add(np.array(["a", "b", "a"], dtype=object))
    second = index.add(np.array(["c", "b"], dtype=object))
    assert first.tolist() == [0, 1, 0]
    assert second.tolist() == [2, 1]
    assert index.lookup(np.array(["zz", "c"], dtype=object)).tolist() == [-1, 2]


def test_core_counts_everything_and_keeps_sources() -> None:
    core = IngestCore()
    source = Source("t", 3, 42)
    batch = core.process(b"gpu,gpu=a DCGM_FI_DEV_GPU_TEMP=1 10\nbroken\nfoo,x=1 y=1 1\n", source_of=lambda _: source)
    assert core.stats.lines == 3
    assert core.stats.values == 1
    assert core.stats.rejected == 1
    assert core.stats.deadlettered == 2
    assert {d.stage for d in batch.deadletters} == {"decode", "validate"}
    assert all(d.source == source for d in batch.deadletters)
    assert core.stats.reasons == {"missing fields": 1, "unknown measurement": 1}


@pytest.mark.parametrize("line", [b"plain line", b"bad \xff bytes"])
def test_dead_letter_json_round_trips(line: bytes) -> None:
    letter = DeadLetter("decode", "invalid value 'x' for field 'f' at column 3", line, Source("topic", 1, 7))
    assert DeadLetter.from_json(letter.to_json()) == letter
    assert letter.category == "invalid value"


def test_fields_the_catalog_does_not_know_are_stored_and_counted() -> None:
    from ingest.pipeline import IngestCore

    core = IngestCore()
    batch = core.process(
        b"gpu,node=n1,gpu=n1-gpu0 DCGM_FI_DEV_GPU_TEMP=60,DCGM_FI_DEV_ENC_UTIL=123i 1000000000\n"
        b"gpu,node=n1,gpu=n1-gpu1 DCGM_FI_DEV_GPU_TEMP=61 1000000000\n"
    )
    assert batch.deadletters == []
    frame = batch.frames["gpu"]
    assert frame.fields["DCGM_FI_DEV_ENC_UTIL"].present.tolist() == [True, False]
    assert core.stats.uncatalogued_values == 1
    assert core.stats.as_fields()["uncatalogued_values"] == 1


def test_an_id_too_long_to_be_a_host_name_is_dead_lettered_and_its_neighbours_kept() -> None:
    from ingest.pipeline import IngestCore
    from vocab.bounds import MAX_ID_LENGTH

    longest, too_long = "n" * MAX_ID_LENGTH, "x" * 40_000  # (a line past 64 KiB the decoder refuses)
    data = "".join(
        f"gpu,gpu={gpu},node=n1 DCGM_FI_DEV_GPU_TEMP=40 1767225600000000000\n" for gpu in (too_long, "n1-gpu0", longest)
    ).encode()
    batch = IngestCore().process(data)
    assert sorted(batch.frames["gpu"].tag("gpu").tolist()) == sorted(["n1-gpu0", longest])
    assert [(d.stage, d.reason) for d in batch.deadletters] == [
        ("validate", f"gpu: entity id of 40,000 characters (the limit is {MAX_ID_LENGTH}) [rule ids.length]")
    ]


@pytest.mark.parametrize(
    ("tags", "rule"),
    [
        ("gpu=n1-gpu0,node=n[0-15]", "node: a node id with brackets, commas or spaces is a host list"),
        ("gpu=n1-gpu0,node=-rf", "[rule ids.first]"),
        ("gpu=n1-gpu0,node=n1..x", "[rule ids.node.charset]"),
        ("gpu=n1-gpu0,node=n1,job=12;reboot", "job: a job id holds letters"),
        ("gpu=n1-gpu0,node=n1,job=--help", "[rule ids.first]"),
        ("gpu=n1-gpu$(id),node=n1", "gpu: an entity id holds letters"),
    ],
)
def test_a_node_job_or_entity_tag_the_id_grammar_refuses_is_dead_lettered_naming_the_rule(tags: str, rule: str) -> None:
    from ingest.pipeline import IngestCore

    good = "gpu,gpu=n2-gpu0,node=n2,job=idle DCGM_FI_DEV_GPU_TEMP=40 1767225600000000000\n"
    data = (good + f"gpu,{tags} DCGM_FI_DEV_GPU_TEMP=41 1767225600000000000\n" + good.replace("n2", "n3")).encode()
    batch = IngestCore().process(data)
    assert batch.frames["gpu"].tag("node").tolist() == ["n2", "n3"]  # "idle" is a job id
    [letter] = batch.deadletters
    assert letter.stage == "validate" and rule in letter.reason and "[rule ids." in letter.reason
    assert letter.line.decode().startswith(f"gpu,{tags} ")


def test_an_id_refused_once_is_refused_again_and_a_good_one_stays_good() -> None:
    from ingest.pipeline import IngestCore

    core = IngestCore()
    data = b"gpu,gpu=n1-gpu0,node=n1 T=1 1767225600000000000\ngpu,gpu=n1-gpu1,node=n[1] T=1 1767225600000000000\n"
    for _ in range(2):  # the second batch goes through the remembered ids
        batch = core.process(data)
        assert batch.frames["gpu"].tag("gpu").tolist() == ["n1-gpu0"]
        assert [d.line for d in batch.deadletters] == [data.split(b"\n")[1]]


def test_a_lone_line_from_the_year_2226_cannot_set_the_streams_clock() -> None:
    """A batch of one line (Kafka may deliver a poll of one message) stamped centuries ahead: it
    is dead-lettered against the wall clock, and the real lines after it are all kept."""
    from ingest.pipeline import IngestCore

    core = IngestCore()
    t = 1_767_225_600_000_000_000
    far = core.process(f"gpu,gpu=n1-gpu0 DCGM_FI_DEV_GPU_TEMP=40 {8_000_000_000 * 10**9}\n".encode())
    assert far.value_count == 0 and "ahead of the wall clock" in far.deadletters[0].reason
    real = core.process("".join(f"gpu,gpu=n1-gpu{i} DCGM_FI_DEV_GPU_TEMP=40 {t}\n" for i in range(8)).encode())
    assert real.value_count == 8 and not real.deadletters
