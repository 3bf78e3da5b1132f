"""Every bound on what the service reads from outside, each with its reason, in one place: the id
grammar's lengths, what one scheduler event may name, and how much any importer of cluster context
reads.

Every door (`aiops topology import`'s ibnetdiscover, LLDP, inventory CSV, NetBox and
node-name-map readers; the Slurm and Kubernetes readers; the scheduler's events; the id grammar
every door applies, `vocab.ids`) holds input it did not write: a host's node description, an
inventory row, a scheduler's body. A number in it must not decide how much memory or time the
service spends, so each count is checked against a bound here *before* anything is built from it,
and a file's size before it is read. A value past a bound is refused with one line naming the
file, the place and the bound, never a traceback, never a partial import.

The bounds are generous for the largest real installations (tens of thousands of GPUs) and far
below what would exhaust a 2 GiB process. The doors' own wire bounds (a remote-write body, a Kafka
message, an API request) stay beside the protocol they bound.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

MIB = 1 << 20

# --- ids (the grammar in vocab/ids.py) -------------------------------------------------------
# RFC 1035 2.3.4 and RFC 1123 2.1: 63 octets a label, 253 a name written without its final dot.
MAX_NODE_LENGTH = 253
MAX_LABEL_LENGTH = 63
# A host name with a short suffix ("-gpu3", "-nic7-optic", ":1/3/2"); twice a host name leaves room
# for any site's naming and stays far below InfluxDB's 64 KB series key.
MAX_ID_LENGTH = 512
# Slurm's job ids are numbers with an array or het suffix; a Kubernetes namespace/name is at most
# 63 + 1 + 253.
MAX_JOB_LENGTH = 320
# The ids the service makes itself (incident `inc-<time>-<hash>`, 30 characters; plan, 20 hex;
# silence `sil-<hex>`, 16): what a URL path segment and a file name carry as they are.
MAX_RECORD_ID_LENGTH = 128

# --- files -----------------------------------------------------------------------------------
# ibnetdiscover of a 10,000-GPU fabric (1,250 nodes x 8 HCAs, ~600 switches of 64 ports) is about
# 60,000 lines, 5 MB; 64 MB is room for a fabric ten times that, and parses in seconds.
MAX_FABRIC_BYTES = 64 * MIB
# lldpcli -f json of one host: a few KB per interface, a host has at most a few dozen
MAX_LLDP_FILE_BYTES = 4 * MIB
# a folder of LLDP files is one per host: as many hosts as a fabric may have
MAX_LLDP_FILES = 100_000
# an inventory row is ~100 bytes (CSV), a NetBox device ~5 KB (JSON, with nested objects);
# 200,000 devices of NetBox JSON would be ~1 GB, more than a process should parse: 256 MB holds
# 50,000 NetBox devices or any CSV of MAX_DEVICES rows
MAX_INVENTORY_BYTES = 256 * MIB
# the node-name map: one line (~60 bytes) per GUID
MAX_NAME_MAP_BYTES = 64 * MIB
# slurmrestd's job JSON is ~10 KB a job (v0.0.40 on); a 10,000-GPU cluster runs at most ~10,000
# jobs at once, plus those Slurm keeps after they end (MinJobAge, 300 s): ~100 MB; twice that
MAX_SLURM_BYTES = 256 * MIB
# a PodList page (500 pods of ~20 KB) is ~10 MB; an unpaged `kubectl get pods -A -o json` of a
# large cluster some 100s of MB: the same room as Slurm's
MAX_KUBERNETES_BYTES = 256 * MIB
# one watch line is one object: etcd refuses a value over 1.5 MiB (--max-request-bytes), the
# watch event's wrapping adds little; 8 MiB is room and a bound on one readline
MAX_WATCH_LINE_BYTES = 8 * MIB
# the kubelet's pod-resources List of one node: a few hundred pods of a few devices
MAX_POD_RESOURCES_BYTES = 16 * MIB

# --- JSON ------------------------------------------------------------------------------------
# The deepest real document read here (Slurm v0.0.44 jobs: body, jobs[], job_resources, nodes,
# allocation[], sockets[], cores[], status[]) nests about 10 deep; NetBox's config_context is a
# site's own JSON, kept shallow by people. 64 is ample, and far below the interpreter's recursion
# limit (1,000) that json.loads and any recursive walk would hit as a RecursionError.
MAX_JSON_DEPTH = 64

# --- counts ----------------------------------------------------------------------------------
# GPUs in one node: HGX boards carry 8, GB200 NVL72 compute trays 4, the densest chassis sold
# 16-20; 64 leaves room for anything real while `gpus=50000000` cannot build 50 million entities
MAX_GPUS_PER_NODE = 64
# NVSwitches on a board: 4 on HGX H100/H200, 2 on B200; a GB200 NVL72 rack has 18 switch trays
MAX_NVSWITCHES_PER_NODE = 64
# PSUs in one chassis: 6 on a DGX H100, 8 at most on the largest; 64 for a rack-level power shelf
MAX_PSUS_PER_NODE = 64
# NICs (HCAs) per node: 8 compute + 2 storage on a DGX; 64 is room
MAX_NICS_PER_NODE = 64
# rows (devices) of an inventory: every node, switch, PDU and PSU of a 100,000-GPU site
MAX_DEVICES = 200_000
# nodes of a fabric (switches, HCAs, routers): 100,000 GPUs' HCAs and their switches
MAX_FABRIC_NODES = 200_000
# InfiniBand port numbers are 8 bits (IBTA vol. 1, 14.2.5.6: port 255 is reserved); the largest
# switch (Quantum-2, 64 NDR ports, 128 split) numbers below that
MAX_PORT = 254
# hosts one Slurm host list may name (`n[0-999999999]` names a billion), and nodes one scheduler
# event may name (a job on more nodes than the largest cluster has is a forged or broken event,
# refused before a Schedule builds one entry per node): the largest clusters have tens of
# thousands of nodes
MAX_HOSTS = 100_000
# hosts all the host lists of one scheduler document may name together (every job's, every
# reservation's): the per-list bound alone lets 2,000 jobs of `n[00000-99999]` (263 KB) name 200
# million. The largest cluster this budget is sized for is 1,000,000 GPUs at 8 a node, 125,000
# nodes (ten times the 100,000 GPUs the project is measured at), and each node may appear in up to
# 8 jobs at once (one a GPU, the densest real sharing): 1,000,000 names, about 70 MB of strings,
# counted before any list is expanded
MAX_HOSTS_PER_DOCUMENT = 1_000_000
# GPU indices a node's GRES may name, as MAX_GPUS_PER_NODE
MAX_GPU_INDEX = MAX_GPUS_PER_NODE - 1
# a rack is at most 58U (OCP open rack), 48U or 52U commonly: a position is a slot number
MAX_RACK_POSITION = 100.0


class BoundError(ValueError):
    """An input past one of these bounds; the message names the file, the place and the bound.
    Each reader re-raises it as its own format error."""


def read_bytes(path: Path, limit: int, what: str) -> bytes:
    """A file's bytes, refused before reading when it is over `limit` (a file growing while read
    is cut at the limit and refused too)."""
    size = path.stat().st_size
    if size > limit:
        raise BoundError(f"{path}: {size:,} bytes, over the {limit // MIB} MB a {what} may be [bound file_size]")
    with path.open("rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise BoundError(f"{path}: grew past the {limit // MIB} MB a {what} may be while read [bound file_size]")
    return data


def read_text(path: Path, limit: int, what: str) -> str:
    """`read_bytes` as UTF-8 text; a byte that is not UTF-8 is refused with its offset."""
    data = read_bytes(path, limit, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BoundError(f"{path}: not text (byte {exc.start} is not UTF-8)") from None


# a JSON string, its escapes included; possessive so a long or unterminated one is scanned once
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth(data: bytes | str) -> int:
    """How deep a JSON text nests, found without parsing and without recursion: strings taken out
    (a bracket inside one is text), then a running count over the brackets alone, all in C."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    brackets = _STRING.sub(b'""', raw).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    import numpy as np

    steps = np.frombuffer(brackets, dtype=np.uint8)
    # "[" 0x5b and "{" 0x7b open (bit 1 set), "]" 0x5d and "}" 0x7d close (bit 1 clear)
    moves = (steps & 0x02).astype(np.int8) - 1
    return int(np.cumsum(moves, dtype=np.int32).max())


def loads(data: bytes | str, where: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON with its depth checked first; BoundError naming `where` for a document nested past
    `max_depth`, json.JSONDecodeError (a ValueError) for one that is not JSON."""
    depth = json_depth(data)
    if depth > max_depth:
        raise BoundError(f"{where}: JSON nested {depth:,} deep, over the {max_depth} allowed [bound json_depth]")
    try:
        return json.loads(data)
    except RecursionError:  # cannot happen below the depth bound; said as one, should it
        raise BoundError(f"{where}: JSON nested too deep to parse [bound json_depth]") from None


def count(value: int, limit: int, where: str, what: str, reason: str) -> int:
    """`value` when within 0..limit, else BoundError naming where, what and why the limit."""
    if value < 0:
        raise BoundError(f"{where}: {what} cannot be negative ({value}) [bound {what.replace(' ', '_')}]")
    if value > limit:
        raise BoundError(f"{where}: {what} {value:,} is over {limit:,} ({reason}) [bound {what.replace(' ', '_')}]")
    return value


__all__ = [
    "MAX_DEVICES",
    "MAX_FABRIC_BYTES",
    "MAX_FABRIC_NODES",
    "MAX_GPUS_PER_NODE",
    "MAX_GPU_INDEX",
    "MAX_HOSTS",
    "MAX_HOSTS_PER_DOCUMENT",
    "MAX_ID_LENGTH",
    "MAX_INVENTORY_BYTES",
    "MAX_JOB_LENGTH",
    "MAX_JSON_DEPTH",
    "MAX_KUBERNETES_BYTES",
    "MAX_LABEL_LENGTH",
    "MAX_LLDP_FILES",
    "MAX_LLDP_FILE_BYTES",
    "MAX_NAME_MAP_BYTES",
    "MAX_NICS_PER_NODE",
    "MAX_NODE_LENGTH",
    "MAX_NVSWITCHES_PER_NODE",
    "MAX_POD_RESOURCES_BYTES",
    "MAX_PORT",
    "MAX_PSUS_PER_NODE",
    "MAX_RACK_POSITION",
    "MAX_RECORD_ID_LENGTH",
    "MAX_SLURM_BYTES",
    "MAX_WATCH_LINE_BYTES",
    "MIB",
    "BoundError",
    "count",
    "json_depth",
    "loads",
    "read_bytes",
    "read_text",
]
