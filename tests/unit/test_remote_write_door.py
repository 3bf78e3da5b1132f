"""Issue 64 (items 2, 3, 7): the remote-write door's bounds per request, its dead letters (one per
bad series, capped), its credentials and bind policy, and DCGM's blank sentinels at every door.
The memory-limited run with real Kafka is tests/integration/test_remote_write_limits.py."""

from __future__ import annotations

import base64
import http.client
import threading
from collections.abc import Iterator

import numpy as np
import pytest
from pydantic import SecretStr

from ingest.dcgm_blanks import Width, blank_mask, blank_name
from ingest.pipeline import IngestCore
from ingest.remote_write import (
    Limits,
    RequestTooLargeError,
    Series,
    decode_request,
    encode_write_request,
    map_series,
    parse_write_request,
    snappy_compress_literal,
)
from ingest.remote_write_service import Credentials, RemoteWriteReceiver, start_refusal
from tests.remote_write_bodies import empty_series_bomb, nan_series
from tests.unit.test_remote_write import T, _dcgm, _Producer
from vocab.settings import KafkaSettings

OK = {"content-encoding": "snappy", "content-type": "application/x-protobuf"}


def never(_n: int) -> bytes:
    raise AssertionError("the body was read")


def test_an_empty_series_bomb_is_refused_at_the_series_bound() -> None:
    # 18 KB decoding to 200,000 empty TimeSeries: was 200,000 objects and as many dead letters
    with pytest.raises(RequestTooLargeError, match="50,000 series"):
        decode_request(empty_series_bomb(200_000))


def test_every_bound_refuses_the_whole_request() -> None:
    small = Limits(series=3, samples=4, labels_per_series=3, label_bytes_per_series=100, labels=5)
    ok = [Series({"__name__": "a", "b": "c"}, [(1.0, T)])] * 2
    assert len(parse_write_request(encode_write_request(ok), small)) == 2
    cases = {
        "series": [Series({"__name__": "a"}, [])] * 4,
        "samples": [Series({"__name__": "a"}, [(1.0, T)] * 5)],
        "labels": [Series({str(i): "x" for i in range(4)}, [])],
        "bytes of labels": [Series({"__name__": "x" * 200}, [])],
        "labels in one request": [Series({"a": "1", "b": "2"}, [])] * 3,
    }
    for words, series in cases.items():
        with pytest.raises(RequestTooLargeError, match=words):
            parse_write_request(encode_write_request(series), small)


def test_non_finite_values_are_one_dead_letter_per_series_with_the_count() -> None:
    series = _dcgm(0, "DCGM_FI_DEV_GPU_TEMP", 40.0)
    series.samples = [(float("nan"), T + i) for i in range(200_000)] + [(41.0, T - 1000)]
    mapped = map_series([series])
    (letter,) = mapped.deadletters  # was 200,000
    assert "200000 of 200001" in letter.reason and "nan x200000" in letter.reason
    assert mapped.counts["samples"] == 1  # the finite sample is kept


def test_dead_letters_of_one_request_are_capped_with_one_summary() -> None:
    mapped = decode_request(nan_series(10_000))
    assert len(mapped.deadletters) == 101  # 100 and the summary; was 10,000 Kafka messages
    assert "9,900 more series" in mapped.deadletters[-1].reason
    assert mapped.counts["series_deadlettered"] == 10_000 and mapped.counts["deadletters_dropped"] == 9_900


@pytest.mark.parametrize(
    ("value", "width", "name"),
    [
        (9223372036854775794.0, None, "DCGM_INT64_BLANK"),  # as a float it is 2**63
        (float(0x7FFFFFF2), None, "DCGM_INT32_NOT_SUPPORTED"),
        (140737488355330.0, None, "DCGM_FP64_NOT_SUPPORTED"),
        (140737488355328.0, Width.FP64, "DCGM_FP64_BLANK"),
        (float(0x7FFFFFF0 + 5), Width.INT32, "DCGM_INT32_BLANK"),
        (float(0x7FFFFFF0), Width.INT64, None),  # a big but real 64-bit count
        (float(0x7FFFFFF0 + 20), None, None),  # above the family, field width unknown: a reading
        (3.0e9, None, None),
        (140737488355328.5, None, None),
    ],
)
def test_blank_names(value: float, width: Width | None, name: str | None) -> None:
    assert blank_name(value, width) == name
    assert bool(blank_mask(np.array([value]), width)[0]) == (name is not None)


def test_int_columns_judge_exactly() -> None:
    values = np.array([0x7FFFFFFFFFFFFFF2, 0x7FFFFFF3, 0x7FFFFFF0 + 16, 5], dtype=np.int64)
    assert blank_mask(values, None).tolist() == [True, True, False, False]


def test_an_uncatalogued_dcgm_blank_is_dropped_at_the_remote_write_door() -> None:
    # a real dcgm-exporter exposition: an unsupported field as DCGM_INT64_NOT_SUPPORTED
    series = [
        _dcgm(0, "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", 9223372036854775794.0),
        _dcgm(0, "DCGM_FI_DEV_GPU_TEMP", 140737488355328.0),
        _dcgm(0, "DCGM_FI_DEV_POWER_USAGE", 300.0),
    ]
    mapped = map_series(series)
    (line,) = mapped.lines["n00000"]
    assert b"CRC" not in line and b"TEMP" not in line and b"POWER_USAGE=300" in line
    assert mapped.counts["dcgm_blanks"] == 2 and mapped.deadletters == []


def test_an_uncatalogued_dcgm_blank_is_masked_at_the_line_protocol_door() -> None:
    # what Telegraf's prometheus input makes of the same exposition: every sample a float
    lines = (
        b"gpu,gpu=n00000-gpu0,node=n00000 DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL=9.223372036854776e+18,"
        b'DCGM_FI_DEV_X_INT=2147483634i,DCGM_FI_DEV_NAME="<<<NOT_SUPPORTED>>>",other=9.3e18,'
        b"DCGM_FI_DEV_GPU_TEMP=40 1790000000000000000\n"
    )
    result = IngestCore().process(lines)
    frame = result.frames["gpu"]
    for name in ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_X_INT", "DCGM_FI_DEV_NAME"):
        assert not frame.fields[name].present.any(), name
    assert frame.fields["other"].present.all()  # not DCGM's: no sentinel applies
    assert frame.fields["DCGM_FI_DEV_GPU_TEMP"].present.all()


@pytest.fixture
def door() -> Iterator[tuple[RemoteWriteReceiver, _Producer]]:
    producer = _Producer()
    receiver = RemoteWriteReceiver(
        KafkaSettings(),
        "127.0.0.1",
        0,
        producer=producer,  # type: ignore[arg-type]
        credentials=Credentials(SecretStr("s3cret"), ("prom", SecretStr("pw"))),
    )
    stop = threading.Event()
    thread = threading.Thread(target=receiver.serve, args=(stop.is_set,), daemon=True)
    thread.start()
    yield receiver, producer
    stop.set()
    thread.join(timeout=10)


def test_credentials_are_checked_before_the_body_is_read(door: tuple[RemoteWriteReceiver, _Producer]) -> None:
    receiver, producer = door
    xid = _dcgm(3, "DCGM_FI_DEV_XID_ERRORS", 79.0, host="n00002")
    body = snappy_compress_literal(encode_write_request([xid]))
    n = str(len(body))
    for auth in (None, "Bearer wrong", "Bearer s3cret2", "Basic " + base64.b64encode(b"prom:no").decode(), "s3cret"):
        headers = {**OK, "content-length": n, **({"authorization": auth} if auth else {})}
        assert receiver.handle(headers, never)[0] == 401, auth
    assert producer.sent == []
    basic = "Basic " + base64.b64encode(b"prom:pw").decode()
    for auth in ("Bearer s3cret", basic):
        assert receiver.handle({**OK, "content-length": n, "authorization": auth}, lambda _n: body)[0] == 204
    # over the wire: the 401 names the scheme, and the connection is closed (the body unread)
    conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
    conn.request(
        "POST", "/api/v1/write", body, {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf"}
    )
    response = conn.getresponse()
    assert response.status == 401 and response.getheader("WWW-Authenticate") == "Bearer"
    assert response.getheader("Connection") == "close"


def test_the_door_binds_loopback_and_refuses_to_open_elsewhere_without_credentials_and_tls() -> None:
    none, token = Credentials(), Credentials(SecretStr("t"))
    assert start_refusal("127.0.0.1", none, tls=False, open_door=False) is None
    assert start_refusal("::1", none, tls=False, open_door=False) is None
    assert "without credentials and TLS" in (start_refusal("0.0.0.0", none, tls=False, open_door=False) or "")
    assert "without TLS" in (start_refusal("10.0.0.5", token, tls=False, open_door=False) or "")
    assert start_refusal("10.0.0.5", token, tls=True, open_door=False) is None
    assert start_refusal("0.0.0.0", none, tls=False, open_door=True) is None
    with pytest.raises(ValueError, match="not loopback"):
        RemoteWriteReceiver(KafkaSettings(), "0.0.0.0", 0, producer=_Producer())  # type: ignore[arg-type]
    from aiops.cli.checks import listen_address

    assert listen_address(":9201") == ("127.0.0.1", 9201)
