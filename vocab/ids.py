"""The grammar of ids: what a node, an entity (GPU, NIC, optic, switch, port, rack, PSU) and a job
id may contain. Every door applies it (line-protocol tags, every importer, the events topic, the
API); a name outside it is refused with the rule it broke, so nothing downstream has to guess
what a string means. And the scheme: how the id of a node's GPU, NIC, optic, NVSwitch or PSU, a
rack's cooling loop, a switch port or a cable is spelled from its parts (`gpu_id`, `optic_id`,
`link_id`, ...), and the few readings back (`gpu_index`): no other module builds or cuts an id
(tests/unit/test_facts.py). The lengths are bounds among the others (vocab/bounds.py).

Why these rules:
- printable ASCII only: a host name is ASCII in DNS (an international name travels as punycode,
  RFC 3492), and a look-alike letter (Cyrillic "о" in "n0оо1") would name a node no tool can
  find;
- a letter or digit first: a leading "-" turns an argument into an option for every command line
  tool an executor runs (`scontrol`, a site's reset script);
- a node name is an RFC 1123 host name (labels of letters, digits and "-", at most 63 octets each,
  253 in all; "_" is tolerated because real sites use it and no tool reads it specially): no
  brackets, commas or spaces, since Slurm reads `n[0-15]` or `n1,n2` as many nodes
  (`scontrol update NodeName=...` expands host lists), and no "/", which changes a URL's path;
- an entity id is a node name with a suffix: it may also hold ":" and "/" (a switch port, "leaf-3:p7"
  or an NDR port label "sw01:1/3/2"), never anything a shell, a URL or a host list reads;
- a node name is never a word the scheduler reads as many nodes: Slurm's `NodeName=ALL` (any
  case: 22.05.8's `scontrol update NodeName=all State=DRAIN` drained all four nodes of the suite's
  cluster) and `DEFAULT` (slurm.conf's defaults line), which no site can name a host; a name the
  scheduler expands some other way (a slurm.conf NodeSet, a feature) looks like any host name,
  so the executors also ask the scheduler what a name means before acting on it (act.executors);
- an entity id may hold "/" only in its port part, after a ":" ("sw01:1/3/2"), never ".." or an
  empty segment: an id is shown in URLs and made into file names (incident pages), where "../"
  or "a/b" would name another place;
- a job id is a scheduler's: Slurm's "1234", "1234_7" (array), "1234+1" (heterogeneous), a
  Kubernetes "namespace/name"; it is shown and joined on, never acted on.

A job's *name* (free text a user chose) is not an id: it is shown escaped and never parsed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vocab.bounds import MAX_ID_LENGTH, MAX_JOB_LENGTH, MAX_LABEL_LENGTH, MAX_NODE_LENGTH, MAX_RECORD_ID_LENGTH

_LABEL = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")
_ENTITY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")
_JOB = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/+@-]*$")
_PRINTABLE_ASCII = re.compile(r"^[\x20-\x7e]*$")
_HOSTLIST = re.compile(r"[\[\],\s]")
# Words a scheduler reads as something other than one host, compared without case (Slurm's are
# case-insensitive; see the module's docstring). Kubernetes reserves no node name the RFC 1123
# grammar lets through ("." and ".." are already refused: no empty label).
RESERVED_NODE_NAMES = frozenset({"all", "default"})


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a string is not an id: the rule it broke (a short name a dead letter carries) and a
    sentence for a person."""

    rule: str
    text: str

    def __str__(self) -> str:
        return f"{self.text} [rule {self.rule}]"


class InvalidIdError(ValueError):
    """A string offered as an id that the grammar refuses."""

    def __init__(self, kind: str, value: str, refusal: Refusal) -> None:
        super().__init__(f"{kind} id {shown(value)}: {refusal}")
        self.refusal = refusal


def shown(value: str, limit: int = 80) -> str:
    """A refused value as a message may carry it: repr'd (control characters visible), cut."""
    text = repr(value[: limit + 1])
    return text if len(value) <= limit else f"{text[:-1]}…' ({len(value):,} characters)"


def _common(value: str, limit: int, kind: str) -> Refusal | None:
    if not value:
        return Refusal("ids.empty", f"empty {kind} id")
    if len(value) > limit:
        return Refusal("ids.length", f"{kind} id of {len(value):,} characters (the limit is {limit})")
    if not _PRINTABLE_ASCII.match(value):
        bad = next(c for c in value if not 0x20 <= ord(c) <= 0x7E)
        what = "a control character" if ord(bad) < 0x20 or ord(bad) == 0x7F else "a character outside ASCII"
        return Refusal("ids.ascii", f"{kind} id with {what} (U+{ord(bad):04X})")
    if not value[0].isascii() or not value[0].isalnum():
        return Refusal("ids.first", f"{kind} id must start with a letter or digit, not {value[0]!r}")
    return None


def node_refusal(value: str) -> Refusal | None:
    """Why `value` cannot be a node (host) name, or None."""
    if problem := _common(value, MAX_NODE_LENGTH, "node"):
        return problem
    if _HOSTLIST.search(value):
        return Refusal(
            "ids.node.hostlist",
            "a node id with brackets, commas or spaces is a host list to Slurm (many nodes, not one)",
        )
    if value.lower() in RESERVED_NODE_NAMES:
        return Refusal(
            "ids.node.reserved",
            f"{value!r} is a word the scheduler reads as many nodes (Slurm's NodeName=ALL is every node),"
            " not a host name",
        )
    for label in value.split("."):
        if len(label) > MAX_LABEL_LENGTH:
            return Refusal("ids.node.label", f"a node id label of {len(label)} characters (the limit is 63)")
        if not _LABEL.match(label):
            return Refusal(
                "ids.node.charset",
                "a node id is a host name: letters, digits, '-' and '_' in dot-separated labels,"
                " none empty or ending in '-'",
            )
    return None


def entity_refusal(value: str) -> Refusal | None:
    """Why `value` cannot be an entity id (a GPU, NIC, optic, link, switch, port, rack...), or None."""
    if problem := _common(value, MAX_ID_LENGTH, "entity"):
        return problem
    if not _ENTITY.match(value):
        bad = next(c for c in value if not (c.isalnum() or c in "._:/-"))
        return Refusal(
            "ids.entity.charset",
            f"an entity id holds letters, digits and . _ : / - only, not {bad!r}",
        )
    if ".." in value:
        return Refusal("ids.entity.dots", "an entity id holds no '..' (a path's parent, in a URL or a file name)")
    if "/" in value:
        head, colon, port = value.partition(":")
        if not colon or "/" in head:
            return Refusal("ids.entity.slash", "an entity id holds '/' only in its port part, after a ':' (sw01:1/3/2)")
        if "//" in port or port.startswith("/") or port.endswith("/"):
            return Refusal("ids.entity.slash", "an entity id's port part has no empty segment ('//' or an end '/')")
    return None


def job_refusal(value: str) -> Refusal | None:
    """Why `value` cannot be a job id, or None."""
    if problem := _common(value, MAX_JOB_LENGTH, "job"):
        return problem
    if not _JOB.match(value):
        bad = next(c for c in value if not (c.isalnum() or c in "._:/+@-"))
        return Refusal("ids.job.charset", f"a job id holds letters, digits and . _ : / + @ - only, not {bad!r}")
    return None


def check_node(value: str) -> str:
    """`value` if the grammar accepts it as a node name, else InvalidIdError."""
    if problem := node_refusal(value):
        raise InvalidIdError("node", value, problem)
    return value


def check_entity(value: str) -> str:
    if problem := entity_refusal(value):
        raise InvalidIdError("entity", value, problem)
    return value


def check_job(value: str) -> str:
    if problem := job_refusal(value):
        raise InvalidIdError("job", value, problem)
    return value


# --- the scheme: how the parts of a node, its cables and the switch ports are spelled -----------
# The one place an entity id is built from its parts or cut back into them (issue 67: the grammar
# was spelled in seven modules). The topology file, the telemetry tags, the truth log and the
# incidents spell these ids alike; the names a site gives (a node, a switch, a rack) are its own
# and are not built here. Where a topology is at hand, which node holds a GPU (or a NIC, a PSU) is
# the topology's answer (`rca.graph.TopologyGraph.node_of`), never the spelling: a site's host name
# may itself end in "-gpu3". The Telegraf starlark (config/telegraf/node.conf) spells the GPU and
# NIC ids the same way at the node agent, where no Python runs.


def gpu_id(node: str, index: int | str) -> str:
    """`<node>-gpu<index>`: the GPU of that index on the node (NVML's index, dcgm-exporter's `gpu`
    label, taken as the exporter writes it)."""
    return f"{node}-gpu{index}"


def nic_id(node: str, index: int | str) -> str:
    """`<node>-nic<index>`: the node's HCA `mlx5_<index>` (port 1); on a rail-optimised fabric
    NIC i is on rail i."""
    return f"{node}-nic{index}"


def nic_port_id(node: str, device: str, port: int | str) -> str:
    """`<node>-<device>-p<port>`: an HCA port that is no `mlx5_<i>` port 1 (a second port, another
    driver's device), as the Telegraf mapping names it."""
    return f"{node}-{device}-p{port}"


def optic_id(nic: str) -> str:
    """`<nic>-optic`: the transceiver in the NIC's cage."""
    return f"{nic}-optic"


def nvswitch_id(node: str, index: int) -> str:
    """`<node>-nvsw<index>`: an NVSwitch of the node's board."""
    return f"{node}-nvsw{index}"


def psu_id(node: str, index: int) -> str:
    """`<node>-psu<index>`: a power supply of the node's chassis."""
    return f"{node}-psu{index}"


def cooling_id(rack: str) -> str:
    """`<rack>-cdu`: the rack's cooling loop (its coolant distribution unit)."""
    return f"{rack}-cdu"


def port_id(switch: str, label: str) -> str:
    """`<switch>:<label>`: a switch port (`leaf-p0-r3:p7`, an NDR label `sw01:1/3/2`)."""
    return f"{switch}:{label}"


def link_id(end: str, other: str | None = None, n: int = 1) -> str:
    """The cable's id: `link-<nic>` from a NIC to its switch; `link-<a>-<b>` between two switches
    (the lower tier first) or two NICs cabled straight (a torus); the n-th cable between the same
    ends (a second port of one HCA, parallel uplinks) ends in `-<n>`."""
    base = f"link-{end}" if other is None else f"link-{end}-{other}"
    return base if n == 1 else f"{base}-{n}"


_GPU_ID = re.compile(r"(.*)-gpu(\d+)")


def gpu_index(gpu: str) -> int | None:
    """The index a GPU id was built with (`gpu_id`), None for an id of another shape."""
    match = _GPU_ID.fullmatch(gpu)
    return None if match is None else int(match.group(2))


def node_of_gpu(gpu: str) -> str | None:
    """The node a GPU id was built from, None for an id of another shape: for a tool with no
    topology at hand (where one is, ask it)."""
    match = _GPU_ID.fullmatch(gpu)
    return None if match is None else match.group(1)


def port_label(port: str) -> str | None:
    """The label of a switch port's id (`port_id`), None for an id with no port part."""
    switch, colon, label = port.rpartition(":")
    return label if colon and switch else None


# The ids the service makes itself (incident, plan, silence; their length: vocab.bounds): what a
# URL path segment and a file name carry as they are.
_RECORD_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def record_id_refusal(value: str) -> Refusal | None:
    """Why `value` is no incident, plan or silence id, or None: read back from a run folder or a
    request, it names a page and a file, so no "/" and no leading "." can be in it."""
    if len(value) > MAX_RECORD_ID_LENGTH:
        return Refusal("ids.record.length", f"an id of {len(value):,} characters (the limit is {MAX_RECORD_ID_LENGTH})")
    if not _RECORD_ID.match(value):
        return Refusal(
            "ids.record.charset",
            "an incident, plan or silence id holds letters, digits, '.', '_' and '-' and starts with a letter or digit",
        )
    return None


# Kubernetes' own grammar for a node's name (an RFC 1123 subdomain: lower case, digits, "-" and
# ".", at most 253): kubernetes.io/docs/concepts/overview/working-with-objects/names/
_K8S_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$")


def kubernetes_name_refusal(value: str) -> Refusal | None:
    if problem := node_refusal(value):
        return problem
    if not _K8S_NAME.match(value):
        return Refusal(
            "ids.kubernetes.name",
            "a Kubernetes node name is an RFC 1123 subdomain: lower case letters, digits, '-' and '.'",
        )
    return None


__all__ = [
    "MAX_ID_LENGTH",  # from vocab.bounds, for aiops/api.py until it imports it from there
    "RESERVED_NODE_NAMES",
    "InvalidIdError",
    "Refusal",
    "check_entity",
    "check_job",
    "check_node",
    "cooling_id",
    "entity_refusal",
    "gpu_id",
    "gpu_index",
    "job_refusal",
    "kubernetes_name_refusal",
    "link_id",
    "nic_id",
    "nic_port_id",
    "node_of_gpu",
    "node_refusal",
    "nvswitch_id",
    "optic_id",
    "port_id",
    "port_label",
    "psu_id",
    "record_id_refusal",
    "shown",
]
