"""The Prometheus door's decoding and mapping (ingest/remote_write.py); the real Prometheus runs in
tests/integration/test_prometheus_remote_write.py."""

from __future__ import annotations

import struct

import pytest

from ingest.lineprotocol import decode
from ingest.pipeline import IngestCore
from ingest.remote_write import (
    STALE_NAN_BITS,
    RemoteWriteError,
    Series,
    decode_request,
    encode_write_request,
    map_series,
    parse_write_request,
    snappy_compress_literal,
    snappy_decompress,
)
from ingest.remote_write_service import RemoteWriteReceiver
from vocab.settings import KafkaSettings

T = 1_790_000_000_000  # ms


def _dcgm(gpu: int, name: str, value: float, host: str = "n00000", **extra: str) -> Series:
    labels = {
        "__name__": name,
        "gpu": str(gpu),
        "UUID": f"GPU-{gpu:08d}",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": host,
        "instance": "10.0.0.7:9400",
        "job": "dcgm",
        **extra,
    }
    return Series(labels, [(value, T)])


def test_snappy_copies_including_overlapping_ones() -> None:
    # "abcd" literal, then a 1-byte-offset copy of 8 from offset 4 (overlapping), then a 2-byte
    # offset copy of 3 from offset 12: the format's three element kinds (format_description.txt)
    block = (
        bytes([15, 3 << 2]) + b"abcd" + bytes([1 | (4 << 2), 4]) + bytes([2 | (2 << 2)]) + (12).to_bytes(2, "little")
    )
    assert snappy_decompress(block) == b"abcdabcdabcdabc"


def test_snappy_refuses_before_decompressing_and_on_bad_offsets() -> None:
    huge = snappy_compress_literal(b"x" * 1000)
    with pytest.raises(RemoteWriteError, match="limit"):
        snappy_decompress(huge, max_bytes=999)
    with pytest.raises(RemoteWriteError, match="offset"):
        snappy_decompress(bytes([8, 1 | (0 << 2), 5]))  # a copy before any output
    with pytest.raises(RemoteWriteError, match="declared"):
        snappy_decompress(bytes([5, 0]) + b"a")  # one byte where five were declared
    assert snappy_decompress(snappy_compress_literal(b"y" * 70_000)) == b"y" * 70_000


def test_protobuf_round_trip_and_truncation() -> None:
    series = [_dcgm(3, "DCGM_FI_DEV_GPU_TEMP", 45.0), Series({"__name__": "up"}, [(1.0, -5)])]
    parsed = parse_write_request(encode_write_request(series))
    assert [s.labels for s in parsed] == [s.labels for s in series]
    assert parsed[1].samples == [(1.0, -5)]
    with pytest.raises(RemoteWriteError):
        parse_write_request(encode_write_request(series)[:-3])


def test_one_line_per_gpu_and_scrape_with_the_telegraf_ids() -> None:
    series = [
        _dcgm(3, "DCGM_FI_DEV_GPU_TEMP", 45.0),
        _dcgm(3, "DCGM_FI_DEV_POWER_USAGE", 612.345),
        _dcgm(3, "DCGM_FI_DEV_XID_ERRORS", 79.0, err_code="79", err_msg="GPU has fallen off the bus"),
        _dcgm(4, "DCGM_FI_DEV_GPU_TEMP", 47.0),
    ]
    mapped = map_series(series)
    assert mapped.deadletters == []
    lines = sorted(mapped.lines["n00000"])
    assert lines == [
        b"gpu,gpu=n00000-gpu3,node=n00000 DCGM_FI_DEV_GPU_TEMP=45,DCGM_FI_DEV_POWER_USAGE=612.345,"
        b"DCGM_FI_DEV_XID_ERRORS=79 1790000000000000000",
        b"gpu,gpu=n00000-gpu4,node=n00000 DCGM_FI_DEV_GPU_TEMP=47 1790000000000000000",
    ]
    # the scrape's job name is not the catalog's scheduler job, and is not forwarded
    result = IngestCore().process(b"\n".join(lines) + b"\n")
    assert result.deadletters == []
    frame = result.frames["gpu"]
    assert set(frame.tags) == {"gpu", "node"}
    assert decode(b"\n".join(lines) + b"\n").rejects == []


def test_node_exporter_infiniband_maps_to_the_catalog_nic() -> None:
    labels = {"device": "mlx5_2", "port": "1", "instance": "gpu-node-07:9100", "job": "node"}
    series = [
        Series({"__name__": "node_infiniband_port_data_transmitted_bytes_total", **labels}, [(4096.0, T)]),
        Series({"__name__": "node_infiniband_link_downed_total", **labels}, [(1.0, T)]),
        Series({"__name__": "node_infiniband_state_id", **labels}, [(4.0, T)]),
        Series({"__name__": "node_infiniband_rate_bytes_per_second", **labels}, [(50e9, T)]),
        Series({"__name__": "node_infiniband_unicast_packets_received_total", **labels}, [(9.0, T)]),
    ]
    (line,) = map_series(series).lines["gpu-node-07"]
    assert line == (
        b"nic,nic=gpu-node-07-nic2,node=gpu-node-07 link_downed=1,link_rate_gbps=400,link_state=1,"
        b"port_xmit_data=4096,unicast_packets_received_total=9 1790000000000000000"
    )


def test_what_cannot_be_mapped_is_dead_lettered_and_counted() -> None:
    stale = struct.unpack("<d", struct.pack("<Q", STALE_NAN_BITS))[0]
    series = [
        Series({"__name__": "up", "instance": "x:1"}, [(1.0, T)]),
        _dcgm(0, "DCGM_FI_DEV_GPU_TEMP", 40.0, host="n[0-15]"),  # a host list, not a node
        _dcgm(1, "DCGM_FI_DEV_GPU_TEMP", 40.0, host="n0оо1"),  # Cyrillic look-alikes
        _dcgm(2, "DCGM_FI_DEV_GPU_TEMP", 40.0, GPU_I_ID="1"),
        Series({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0; rm", "Hostname": "n1"}, [(1.0, T)]),
        Series({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "5", "Hostname": "n1"}, [(stale, T), (float("inf"), T)]),
    ]
    mapped = map_series(series)
    reasons = [d.reason for d in mapped.deadletters]
    assert len(reasons) == 6
    assert "no mapping for 'up'" in reasons[0]
    assert "ids.node.hostlist" in reasons[1]
    assert "ids.ascii" in reasons[2]
    assert "MIG" in reasons[3]
    assert "GPU index" in reasons[4]
    assert "not finite" in reasons[5]
    assert mapped.lines == {}
    assert mapped.counts["stale_markers"] == 1 and mapped.counts["series_unmapped"] == 5


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None]] = []
        self.failed = 0

    def send_raw(self, topic: str, value: bytes, key: bytes | None = None, partition: int | None = None) -> None:
        self.sent.append((topic, value, key))

    def flush(self, timeout_s: float = 60.0, should_stop: object = None) -> None:
        pass

    def close(self) -> None:
        pass


def test_receiver_bounds_the_body_and_checks_the_encoding() -> None:
    producer = _Producer()
    receiver = RemoteWriteReceiver(
        KafkaSettings(),
        "127.0.0.1",
        0,
        max_body_bytes=1000,
        producer=producer,  # type: ignore[arg-type]
    )
    try:
        body = snappy_compress_literal(encode_write_request([_dcgm(3, "DCGM_FI_DEV_GPU_TEMP", 45.0)]))
        ok = {"content-encoding": "snappy", "content-type": "application/x-protobuf"}

        def never(_n: int) -> bytes:
            raise AssertionError("the body was read")

        assert receiver.handle({**ok, "content-length": "1001"}, never)[0] == 413
        assert receiver.handle({**ok}, never)[0] == 411
        assert receiver.handle({**ok, "content-encoding": "gzip", "content-length": "10"}, never)[0] == 415
        assert receiver.handle({**ok, "content-length": "3"}, lambda n: b"\xff\xff\xff")[0] == 400
        assert producer.sent == []
        assert receiver.handle({**ok, "content-length": str(len(body))}, lambda n: body)[0] == 204
        (topic, value, key) = producer.sent[0]
        assert topic == "aiops.telemetry" and key == b"n00000"
        assert value.startswith(b"gpu,gpu=n00000-gpu3,node=n00000 DCGM_FI_DEV_GPU_TEMP=45 ")
        # a bomb: a few bytes declaring a gigabyte are refused before any output is made
        bomb = bytes([0x80, 0x80, 0x80, 0x80, 0x04]) + b"\x00a"
        status, text = receiver.handle({**ok, "content-length": str(len(bomb))}, lambda n: bomb)
        assert status == 400 and "limit" in text
        assert decode_request(body).counts["lines"] == 1
    finally:
        receiver._httpd.server_close()


def test_a_node_label_from_a_relabel_wins_over_a_pods_hostname() -> None:
    """An older gpu-operator's dcgm-exporter says Hostname=<its pod's name>; the relabel that
    docs/collectors.md gives (__meta_kubernetes_pod_node_name -> node) names the GPU's node."""
    pod = "nvidia-dcgm-exporter-7xk2p"
    mapped = map_series([_dcgm(3, "DCGM_FI_DEV_GPU_TEMP", 45.0, host=pod, node="gpu-node-017")])
    assert list(mapped.lines) == ["gpu-node-017"]
    assert mapped.lines["gpu-node-017"] == [
        b"gpu,gpu=gpu-node-017-gpu3,node=gpu-node-017 DCGM_FI_DEV_GPU_TEMP=45 1790000000000000000"
    ]
