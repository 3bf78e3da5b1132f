"""The fake InfiniBand sysfs tree: layout as rdmamap/Telegraf read it, and counter changes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.collectors.sysfs_ib import (
    COUNTERS,
    HW_COUNTERS,
    InfinibandTree,
    fake_sysfs_available,
    run_in_fake_sysfs,
)

TELEGRAF = Path.home() / ".cache" / "aiops" / "bin" / "telegraf"


def test_devices_are_symlinks_resolving_inside_sys_class(tmp_path: Path) -> None:
    tree = InfinibandTree(tmp_path, devices=8)
    entries = sorted(os.listdir(tree.sys_class / "infiniband"))
    assert entries == sorted(f"mlx5_{i}" for i in range(8))
    for name in entries:
        link = tree.sys_class / "infiniband" / name
        # rdmamap lists only non-directory entries (lstat), as the kernel's symlinks are
        assert link.is_symlink()
        target = os.readlink(link)
        assert not os.path.isabs(target)
        assert link.resolve().is_relative_to(tree.sys_class.resolve())
        assert link.resolve().name == name


def test_port_layout(tmp_path: Path) -> None:
    tree = InfinibandTree(tmp_path, devices=2, ports=2)
    for dev in ("mlx5_0", "mlx5_1"):
        base = tree.sys_class / "infiniband" / dev
        assert sorted(os.listdir(base / "ports")) == ["1", "2"]
        assert (base / "node_guid").read_text().count(":") == 3
        for port in ("1", "2"):
            port_dir = base / "ports" / port
            assert (port_dir / "state").read_text() == "4: ACTIVE\n"
            assert (port_dir / "phys_state").read_text() == "5: LinkUp\n"
            assert (port_dir / "rate").read_text() == "400 Gb/sec (4X NDR)\n"
            assert (port_dir / "link_layer").read_text() == "InfiniBand\n"
            assert sorted(os.listdir(port_dir / "counters")) == sorted(COUNTERS)
            assert sorted(os.listdir(port_dir / "hw_counters")) == sorted(HW_COUNTERS)
            assert (port_dir / "counters" / "symbol_error").read_text() == "0\n"
            assert (port_dir / "hw_counters" / "lifespan").read_text() == "10\n"
    for name in ("symbol_error", "port_rcv_errors", "link_downed", "link_error_recovery", "port_xmit_wait"):
        assert name in COUNTERS
    for name in ("np_cnp_sent", "rp_cnp_handled", "out_of_sequence"):
        assert name in HW_COUNTERS


def test_without_hw_counters(tmp_path: Path) -> None:
    tree = InfinibandTree(tmp_path, devices=1, rdma_hw_counters=False)
    assert not (tree.port_dir(0) / "hw_counters").exists()
    with pytest.raises(KeyError):
        tree.bump(0, "np_cnp_sent", 1)


def test_bump_changes_the_file(tmp_path: Path) -> None:
    tree = InfinibandTree(tmp_path, devices=4, ports=2)
    tree.bump(2, "symbol_error", 5)
    tree.bump(2, "symbol_error", 2)
    tree.bump(3, "np_cnp_sent", 40, port=2)
    ib = tree.sys_class / "infiniband"
    assert (ib / "mlx5_2" / "ports" / "1" / "counters" / "symbol_error").read_text() == "7\n"
    assert (ib / "mlx5_2" / "ports" / "2" / "counters" / "symbol_error").read_text() == "0\n"
    assert (ib / "mlx5_1" / "ports" / "1" / "counters" / "symbol_error").read_text() == "0\n"
    assert (ib / "mlx5_3" / "ports" / "2" / "hw_counters" / "np_cnp_sent").read_text() == "40\n"
    assert tree.read(2, "symbol_error") == 7
    # writes are atomic renames; nothing is left behind in the counter directories
    assert sorted(os.listdir(ib / "mlx5_2" / "ports" / "1" / "counters")) == sorted(COUNTERS)
    assert os.listdir(tmp_path / ".staging") == []


def test_error_counters_saturate_data_counters_do_not(tmp_path: Path) -> None:
    tree = InfinibandTree(tmp_path, devices=1)
    tree.bump(0, "symbol_error", 70_000)
    tree.bump(0, "link_downed", 300)
    tree.bump(0, "port_xmit_data", 2**40)
    assert tree.read(0, "symbol_error") == 65535
    assert tree.read(0, "link_downed") == 255
    assert tree.read(0, "port_xmit_data") == 2**40
    tree.set_counter(0, "symbol_error", 0)
    assert tree.read(0, "symbol_error") == 0
    with pytest.raises(ValueError, match="only go up"):
        tree.bump(0, "symbol_error", -1)


def test_set_state(tmp_path: Path) -> None:
    tree = InfinibandTree(tmp_path, devices=2)
    port_dir = tree.sys_class / "infiniband" / "mlx5_1" / "ports" / "1"
    tree.set_state(1, active=False)
    assert (port_dir / "state").read_text() == "1: DOWN\n"
    assert (port_dir / "phys_state").read_text() == "2: Polling\n"
    assert tree.read(1, "link_downed") == 1
    tree.set_state(1, active=False)  # already down: no second count
    assert tree.read(1, "link_downed") == 1
    tree.set_state(1, active=True)
    assert (port_dir / "state").read_text() == "4: ACTIVE\n"
    assert (port_dir / "phys_state").read_text() == "5: LinkUp\n"
    tree.set_state(1, active=False, bump_link_downed=False)
    assert tree.read(1, "link_downed") == 1
    assert tree.state(0) == "4: ACTIVE"


def test_out_of_range(tmp_path: Path) -> None:
    tree = InfinibandTree(tmp_path, devices=2, ports=1)
    with pytest.raises(IndexError):
        tree.bump(2, "symbol_error", 1)
    with pytest.raises(IndexError):
        tree.bump(0, "symbol_error", 1, port=2)


@pytest.mark.skipif(not fake_sysfs_available(), reason="cannot bind-mount in a private mount namespace here")
def test_mounted_over_sys_class(tmp_path: Path) -> None:
    tree = InfinibandTree(tmp_path, devices=2)
    tree.bump(1, "port_rcv_errors", 9)
    proc = run_in_fake_sysfs(
        tree,
        ["sh", "-c", "ls /sys/class/infiniband; cat /sys/class/infiniband/mlx5_1/ports/1/counters/port_rcv_errors"],
        stdout=subprocess.PIPE,
    )
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert out.decode().split() == ["mlx5_0", "mlx5_1", "9"]


@pytest.mark.skipif(
    not (TELEGRAF.exists() and fake_sysfs_available()), reason="needs the Telegraf build and a private mount namespace"
)
def test_real_telegraf_reads_the_tree(tmp_path: Path) -> None:
    tree = InfinibandTree(tmp_path / "tree", devices=2)
    tree.bump(0, "symbol_error", 3)
    tree.bump(0, "np_cnp_sent", 42)
    tree.set_state(1, active=False)
    config = tmp_path / "telegraf.conf"
    config.write_text('[agent]\n  hostname = "H"\n[[inputs.infiniband]]\n  gather_rdma = true\n')
    proc = run_in_fake_sysfs(
        tree,
        [str(TELEGRAF), "--config", str(config), "--test"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    lines = [line.removeprefix("> ") for line in out.decode().splitlines() if line.startswith("> ")]
    assert len(lines) == 4  # counters and hw_counters, per device
    by_key: dict[tuple[str, bool], dict[str, str]] = {}
    for line in lines:
        series, fields, _time = line.split(" ")
        assert series.startswith("infiniband,")
        tags = dict(t.split("=", 1) for t in series.split(",")[1:])
        assert set(tags) == {"device", "host", "port"}
        values = dict(f.split("=", 1) for f in fields.split(","))
        by_key[(tags["device"], "lifespan" in values)] = values
    assert set(by_key[("mlx5_0", False)]) == set(COUNTERS)
    assert set(by_key[("mlx5_0", True)]) == set(HW_COUNTERS)
    assert by_key[("mlx5_0", False)]["symbol_error"] == "3u"
    assert by_key[("mlx5_0", True)]["np_cnp_sent"] == "42u"
    assert by_key[("mlx5_1", False)]["link_downed"] == "1u"
