"""A fake ``/sys/class/infiniband`` tree that the real Telegraf ``inputs.infiniband`` plugin reads.

What Telegraf v1.37.2 reads (plugins/inputs/infiniband/infiniband_linux.go, via
github.com/Mellanox/rdmamap v1.1.0):

* ``GetRdmaDeviceList``: the entries of ``/sys/class/infiniband`` that are *not* directories
  (``Readdir`` uses lstat). On a real kernel each entry is a symlink into ``/sys/devices/...``;
  a plain directory there is silently skipped. This tree therefore makes each device a
  relative symlink to ``<sys_class>/.devices/<pci address>/infiniband/mlx5_<i>``, which stays
  inside the bind-mounted directory so it still resolves once mounted over ``/sys/class``.
* ``GetPorts``: every entry of ``<dev>/ports``; each name must parse as an integer, otherwise
  the whole gather fails.
* ``GetRdmaSysfsStats`` / ``GetRdmaSysfsHwStats``: every non-directory entry of
  ``<dev>/ports/<p>/counters`` and ``.../hw_counters``, read as a decimal uint64 (an unreadable
  or unparsable file gives 0). Nothing else (``state``, ``phys_state``, ``rate``,
  ``link_layer``, ``node_guid``, ...) is read: they are written here only so the tree looks like
  the kernel's to other readers.

What it emits, captured from the real binary (Telegraf v1.37.2, ``[[inputs.infiniband]]
gather_rdma = true``, agent ``hostname = "H"``), run with ``--test`` through
:func:`run_in_fake_sysfs` on ``InfinibandTree(root, devices=2, ports=1)`` after
``bump(0, "symbol_error", 3)``, ``bump(0, "np_cnp_sent", 42)``, ``set_state(1, active=False)``.
Each ``>`` is one line, wrapped here at commas; ``--test`` prefixes ``"> "``, sorts the fields
and prints unsigned values with ``u``::

    > infiniband,device=mlx5_0,host=H,port=1
        VL15_dropped=0u,excessive_buffer_overrun_errors=0u,link_downed=0u,link_error_recovery=0u,
        local_link_integrity_errors=0u,multicast_rcv_packets=0u,multicast_xmit_packets=0u,
        port_rcv_constraint_errors=0u,port_rcv_data=0u,port_rcv_errors=0u,port_rcv_packets=0u,
        port_rcv_remote_physical_errors=0u,port_rcv_switch_relay_errors=0u,port_xmit_constraint_errors=0u,
        port_xmit_data=0u,port_xmit_discards=0u,port_xmit_packets=0u,port_xmit_wait=0u,symbol_error=3u,
        unicast_rcv_packets=0u,unicast_xmit_packets=0u
        1796081816000000000
    > infiniband,device=mlx5_0,host=H,port=1
        duplicate_request=0u,implied_nak_seq_err=0u,lifespan=10u,local_ack_timeout_err=0u,
        np_cnp_sent=42u,np_ecn_marked_roce_packets=0u,out_of_buffer=0u,out_of_sequence=0u,
        packet_seq_err=0u,req_cqe_error=0u,req_cqe_flush_error=0u,req_remote_access_errors=0u,
        req_remote_invalid_request=0u,resp_cqe_error=0u,resp_cqe_flush_error=0u,
        resp_local_length_error=0u,resp_remote_access_errors=0u,rnr_nak_retry_err=0u,roce_adp_retrans=0u,
        roce_adp_retrans_to=0u,roce_slow_restart=0u,roce_slow_restart_cnps=0u,roce_slow_restart_trans=0u,
        rp_cnp_handled=0u,rp_cnp_ignored=0u,rx_atomic_requests=0u,rx_icrc_encapsulated=0u,
        rx_read_requests=0u,rx_write_requests=0u
        1796081816000000000
    > infiniband,device=mlx5_1,host=H,port=1
        (the same 21 fields, all 0u except link_downed=1u: the down port is still reported)
        1796081816000000000
    > infiniband,device=mlx5_1,host=H,port=1
        (the same 29 fields as mlx5_0's second line, np_cnp_sent=0u)
        1796081816000000000

With a real output (``[[outputs.file]] data_format = "influx"``, run with ``--once``) the
serializer's ``influx_uint_support`` is false by default, so values are signed integers, fields
come in Go map order (random), devices and ports in directory order, and a value above
2**63-1 is clamped (``InfinibandTree(root, devices=1, ports=2, rdma_hw_counters=False)`` after
``bump(0, "symbol_error", 100000, port=2)`` -- saturated at 65535 -- and
``bump(0, "port_xmit_data", 2**63 + 5)``)::

    infiniband,device=mlx5_0,host=H,port=2 port_rcv_constraint_errors=0i,unicast_rcv_packets=0i,
        unicast_xmit_packets=0i,symbol_error=65535i,port_xmit_packets=0i,...,multicast_rcv_packets=0i
        1796081805000000000
    infiniband,device=mlx5_0,host=H,port=1 port_rcv_errors=0i,...,
        port_xmit_data=9223372036854775807i,...,VL15_dropped=0i 1796081805000000000

If no entry of ``/sys/class/infiniband`` is a non-directory, the plugin errors with
``no InfiniBand devices found in /sys/class/infiniband/`` (``--test`` then exits 1).

In short:

* one measurement, ``infiniband``; tags ``device`` (``mlx5_0``), ``port`` (``"1"``) and the
  agent's ``host``; no tag for link layer, rate, GUID or node description;
* per (device, port) and gather, one line with the 21 ``counters/`` files and, with
  ``gather_rdma = true``, a *second* line with the same tags and timestamp holding every
  ``hw_counters/`` file (``lifespan`` included, although it is a setting in ms, not a
  counter); with ``gather_rdma = false`` or no ``hw_counters`` directory, only the first line. The two
  lines share series key and timestamp, so InfluxDB stores them as one point (and
  ``aggregators.merge`` would join them into one line);
* field names are the file names verbatim (``VL15_dropped`` keeps its capitals); all values
  are integers;
* link state is **not** reported: ``state``/``phys_state``/``rate`` are never read, so a port
  that is down still emits its counters; the only trace of a link going down is
  ``link_downed`` (which :meth:`InfinibandTree.set_state` bumps, as the HCA would).
* ``port_xmit_data``/``port_rcv_data`` are in units of 4 octets, as the kernel exposes them.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "COUNTERS",
    "COUNTER_BITS",
    "HW_COUNTERS",
    "InfinibandTree",
    "fake_sysfs_available",
    "run_in_fake_sysfs",
]

# ports/<p>/counters: the PMA counters that drivers/infiniband/core/sysfs.c exposes, with the
# width the mlx5 driver reports them at (PortCounters for errors and port_xmit_wait, which
# saturate at their maximum; PortCountersExtended, 64 bits, for data and packets).
COUNTER_BITS: dict[str, int] = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
    "port_xmit_data": 64,
    "port_rcv_data": 64,
    "port_xmit_packets": 64,
    "port_rcv_packets": 64,
    "port_xmit_wait": 32,
    "unicast_xmit_packets": 64,
    "unicast_rcv_packets": 64,
    "multicast_xmit_packets": 64,
    "multicast_rcv_packets": 64,
}
COUNTERS: tuple[str, ...] = tuple(COUNTER_BITS)

# ports/<p>/hw_counters as mlx5_ib exposes them (q counters, congestion counters, ext_ppcnt),
# plus ``lifespan``, the counters' cache lifetime in ms, which lives in the same directory.
HW_COUNTERS: tuple[str, ...] = (
    "duplicate_request",
    "implied_nak_seq_err",
    "lifespan",
    "local_ack_timeout_err",
    "np_cnp_sent",
    "np_ecn_marked_roce_packets",
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "req_cqe_error",
    "req_cqe_flush_error",
    "req_remote_access_errors",
    "req_remote_invalid_request",
    "resp_cqe_error",
    "resp_cqe_flush_error",
    "resp_local_length_error",
    "resp_remote_access_errors",
    "rnr_nak_retry_err",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
    "rp_cnp_handled",
    "rp_cnp_ignored",
    "rx_atomic_requests",
    "rx_icrc_encapsulated",
    "rx_read_requests",
    "rx_write_requests",
)
_HW_DEFAULTS = {"lifespan": 10}

STATE_ACTIVE = "4: ACTIVE"
STATE_DOWN = "1: DOWN"
PHYS_LINK_UP = "5: LinkUp"
PHYS_POLLING = "2: Polling"  # what a port with no cable or no peer shows

_DEVICES_DIR = ".devices"  # inside sys_class, so the device symlinks resolve after the bind mount


class InfinibandTree:
    """A sysfs-shaped tree of ``devices`` ConnectX-7 HCAs (``mlx5_0`` ...) with ``ports`` ports each.

    Layout, under ``root``::

        class/                                     <- sys_class: bind-mount this over /sys/class
          infiniband/mlx5_<i> -> ../.devices/<pci>/infiniband/mlx5_<i>
          .devices/<pci>/infiniband/mlx5_<i>/
            node_guid sys_image_guid node_type node_desc fw_ver hca_type hw_rev board_id uevent
            ports/<p>/
              state phys_state rate link_layer lid sm_lid sm_sl lid_mask_count cap_mask
              gids/0 pkeys/0
              counters/<COUNTERS>
              hw_counters/<HW_COUNTERS>            (only with rdma_hw_counters=True)
        .staging/                                  scratch for atomic rewrites

    Every value file holds ``"<text>\\n"`` as the kernel prints it. Writes go through a
    temporary file and ``os.replace``, so a concurrent reader (Telegraf) never sees a
    half-written counter.
    """

    def __init__(
        self,
        root: Path,
        devices: int = 8,
        ports: int = 1,
        rdma_hw_counters: bool = True,
        *,
        link_layer: str = "InfiniBand",
        rate: str = "400 Gb/sec (4X NDR)",
        node_desc_host: str = "node0",
    ) -> None:
        if devices < 1 or ports < 1:
            raise ValueError("need at least one device and one port")
        self.root = Path(root)
        self.sys_class: Path = self.root / "class"
        self.infiniband_dir: Path = self.sys_class / "infiniband"
        self.devices = devices
        self.ports = ports
        self.rdma_hw_counters = rdma_hw_counters
        self._staging = self.root / ".staging"
        self._staging.mkdir(parents=True, exist_ok=True)
        self.infiniband_dir.mkdir(parents=True, exist_ok=True)
        for i in range(devices):
            self._make_device(i, link_layer=link_layer, rate=rate, host=node_desc_host)

    # ------------------------------------------------------------------ names and paths

    @staticmethod
    def device_name(device: int) -> str:
        return f"mlx5_{device}"

    @staticmethod
    def pci_address(device: int) -> str:
        return f"{device // 16:04x}:{(0x0C + 0x10 * (device % 16)) & 0xFF:02x}:00.0"

    def device_dir(self, device: int) -> Path:
        """The real directory behind ``infiniband/mlx5_<device>`` (not the symlink)."""
        self._check(device, 1)
        name = self.device_name(device)
        return self.sys_class / _DEVICES_DIR / self.pci_address(device) / "infiniband" / name

    def port_dir(self, device: int, port: int = 1) -> Path:
        self._check(device, port)
        return self.device_dir(device) / "ports" / str(port)

    def counter_path(self, device: int, counter: str, port: int = 1) -> Path:
        """Path of ``counter`` in ``counters/`` or, failing that, ``hw_counters/``."""
        port_dir = self.port_dir(device, port)
        for sub in ("counters", "hw_counters"):
            path = port_dir / sub / counter
            if path.is_file():
                return path
        raise KeyError(f"no counter {counter!r} on {self.device_name(device)} port {port}")

    # ------------------------------------------------------------------ reading and changing

    def read(self, device: int, counter: str, port: int = 1) -> int:
        return int(self.counter_path(device, counter, port).read_text().strip())

    def set_counter(self, device: int, counter: str, value: int, port: int = 1) -> None:
        """Set a counter outright (e.g. to 0, as a driver reload does)."""
        if value < 0:
            raise ValueError("counters are unsigned")
        path = self.counter_path(device, counter, port)
        self._write(path, str(min(value, counter_max(counter))))

    def bump(self, device: int, counter: str, by: int, port: int = 1) -> None:
        """Add ``by`` to a counter. PortCounters error counters saturate at their IBA width
        (``symbol_error`` stops at 65535, ``link_downed`` at 255), as the hardware's do."""
        if by < 0:
            raise ValueError("counters only go up; use set_counter to reset one")
        self.set_counter(device, counter, self.read(device, counter, port) + by, port)

    def state(self, device: int, port: int = 1) -> str:
        return (self.port_dir(device, port) / "state").read_text().strip()

    def set_state(self, device: int, active: bool, port: int = 1, *, bump_link_downed: bool = True) -> None:
        """Bring a port up (``4: ACTIVE``/``5: LinkUp``) or down (``1: DOWN``/``2: Polling``).

        Telegraf never reads ``state``, so on an ACTIVE -> DOWN transition this also adds one
        to ``link_downed``, as the HCA does; that counter is all Telegraf will show of it.
        """
        port_dir = self.port_dir(device, port)
        was_active = self.state(device, port) == STATE_ACTIVE
        self._write(port_dir / "state", STATE_ACTIVE if active else STATE_DOWN)
        self._write(port_dir / "phys_state", PHYS_LINK_UP if active else PHYS_POLLING)
        if was_active and not active and bump_link_downed:
            self.bump(device, "link_downed", 1, port)

    # ------------------------------------------------------------------ building

    def _check(self, device: int, port: int) -> None:
        if not 0 <= device < self.devices:
            raise IndexError(f"device {device} not in 0..{self.devices - 1}")
        if not 1 <= port <= self.ports:
            raise IndexError(f"port {port} not in 1..{self.ports}")

    def _write(self, path: Path, text: str) -> None:
        fd, tmp = tempfile.mkstemp(dir=self._staging)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text + "\n")
            os.chmod(tmp, 0o444)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _make_device(self, i: int, *, link_layer: str, rate: str, host: str) -> None:
        name = self.device_name(i)
        dev = self.device_dir(i)
        dev.mkdir(parents=True)
        guid = f"{0xB8CEF60300A1B200 + i:016x}"
        guid_text = ":".join(guid[k : k + 4] for k in range(0, 16, 4))
        attrs = {
            "node_guid": guid_text,
            "sys_image_guid": guid_text,
            "node_type": "1: CA",
            "node_desc": f"{host} {name}",
            "fw_ver": "28.39.1002",
            "hca_type": "MT4129",
            "hw_rev": "0x0",
            "board_id": "MT_0000000838",
            "uevent": f"NAME={name}",
        }
        for attr, text in attrs.items():
            self._write(dev / attr, text)
        for p in range(1, self.ports + 1):
            port_dir = dev / "ports" / str(p)
            (port_dir / "counters").mkdir(parents=True)
            (port_dir / "gids").mkdir()
            (port_dir / "pkeys").mkdir()
            port_attrs = {
                "state": STATE_ACTIVE,
                "phys_state": PHYS_LINK_UP,
                "rate": rate,
                "link_layer": link_layer,
                "lid": f"0x{1 + i * self.ports + (p - 1):x}",
                "sm_lid": "0x1",
                "sm_sl": "0",
                "lid_mask_count": "0",
                "cap_mask": "0xa751e848",
                "gids/0": f"fe80:0000:0000:0000:{guid_text}",
                "pkeys/0": "0xffff",
            }
            for attr, text in port_attrs.items():
                self._write(port_dir / attr, text)
            for counter in COUNTERS:
                self._write(port_dir / "counters" / counter, "0")
            if self.rdma_hw_counters:
                (port_dir / "hw_counters").mkdir()
                for counter in HW_COUNTERS:
                    self._write(port_dir / "hw_counters" / counter, str(_HW_DEFAULTS.get(counter, 0)))
        link = self.infiniband_dir / name
        link.symlink_to(os.path.relpath(dev, self.infiniband_dir))


def counter_max(counter: str) -> int:
    """Largest value a counter reaches before it saturates (64-bit for hw_counters)."""
    return (1 << COUNTER_BITS.get(counter, 64)) - 1


# ---------------------------------------------------------------------- running in the tree

_MOUNT_AND_EXEC = 'd=$1; shift; mount --bind "$d" /sys/class && exec "$@"'


def _unshare_prefix() -> list[str]:
    unshare = shutil.which("unshare")
    if unshare is None:
        raise FileNotFoundError("unshare (util-linux) is not installed")
    prefix = [unshare, "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        prefix.insert(1, "--map-root-user")  # needs unprivileged user namespaces
    return prefix


def run_in_fake_sysfs(tree: InfinibandTree, argv: list[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
    """Start ``argv`` in a private mount namespace where ``tree.sys_class`` is ``/sys/class``.

    ``unshare`` and ``sh`` exec in place, so the returned process's pid is ``argv[0]``'s own:
    signal or kill it directly. The mount disappears with the namespace when it exits; the
    host's ``/sys/class`` is never touched. Needs root (or unprivileged user namespaces).
    """
    cmd = [*_unshare_prefix(), "sh", "-c", _MOUNT_AND_EXEC, "sh", str(tree.sys_class), *argv]
    return subprocess.Popen(cmd, **popen_kwargs)


@functools.cache
def fake_sysfs_available() -> bool:
    """Whether :func:`run_in_fake_sysfs` works here (for ``pytest.mark.skipif``)."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = InfinibandTree(Path(tmp), devices=1)
        try:
            proc = run_in_fake_sysfs(
                tree,
                ["cat", "/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            return False
        out, _ = proc.communicate(timeout=30)
        return proc.returncode == 0 and out.strip() == b"0"
