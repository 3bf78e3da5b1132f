"""The importer against output the real tools write here, not only recorded files:
- Debian's ibsim simulates an InfiniBand fabric described in its net format, and the real
  `ibnetdiscover` (infiniband-diags) discovers it through ibsim's umad2sim preload, in both of its
  output formats;
- real lldpd daemons in network namespaces, joined by veth pairs as hosts' NICs are cabled to
  leaf ports, and the real `lldpcli -f json` / `-f json0` of each host.
`scripts/services up` installs the packages (apt); the namespaces need root, as CI has here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from context.fabric import build
from context.ibnetdiscover import read
from context.lldp import fabric_from_lldp, read_neighbours
from rca.graph import TopologyGraph

HOSTS, RAILS = 2, 2


def _need(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: scripts/services up installs ibsim-utils, "
                    "infiniband-diags and lldpd from Debian")  # fmt: skip


def _net(moved: bool) -> str:
    """ibsim's net format: HCA r of each host on rail r's leaf, one spine; one link at 1x width
    (gpu001's rail-1 cable) and, if `moved`, gpu000's rail-1 HCA cabled to rail 0's leaf."""
    leaf_ports: dict[str, list[str]] = {f"leaf-r{r}": [] for r in range(RAILS)}
    hcas = []
    for h in range(HOSTS):
        for r in range(RAILS):
            leaf = "leaf-r0" if moved and (h, r) == (0, 1) else f"leaf-r{r}"
            port = h + 1 + (4 if leaf != f"leaf-r{r}" else 0)
            width = "\tw=1" if (h, r) == (1, 1) else ""
            name = f"gpu{h:03d} mlx5_{r}"
            leaf_ports[leaf].append(f'[{port}]\t"{name}"[1]{width}')
            hcas.append(f'Hca\t1\t"{name}"\n[1]\t"{leaf}"[{port}]{width}\n')
    switches = [
        f'Switch\t8\t"{leaf}"\n' + "\n".join([*ports, f'[8]\t"spine-0"[{r + 1}]']) + "\n"
        for r, (leaf, ports) in enumerate(leaf_ports.items())
    ]
    spine = 'Switch\t8\t"spine-0"\n' + "\n".join(f'[{r + 1}]\t"leaf-r{r}"[8]' for r in range(RAILS)) + "\n"
    return "\n".join([*switches, spine, *hcas])


def _ibnetdiscover(tmp_path: Path, net: str, *flags: str) -> Path:
    _need("ibsim", "ibsim-run", "ibnetdiscover")
    (tmp_path / "net").write_text(net)
    sim = subprocess.Popen(
        ["ibsim", "-s", str(tmp_path / "net")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        time.sleep(1.5)  # ibsim parses the net and opens its socket
        out = subprocess.run(
            ["ibsim-run", "ibnetdiscover", *flags], capture_output=True, text=True, timeout=60, check=True
        )
    finally:
        sim.kill()
        sim.communicate()
    written = tmp_path / ("fabric-p.txt" if flags else "fabric.txt")
    written.write_text(out.stdout)
    return written


@pytest.mark.parametrize("flags", [(), ("-p",)], ids=["topology", "ports"])
def test_the_real_ibnetdiscover_under_ibsim_gives_roles_rails_and_the_width_finding(
    tmp_path: Path, flags: tuple[str, ...]
) -> None:
    topology = build(read(_ibnetdiscover(tmp_path, _net(moved=False), *flags)))
    TopologyGraph(topology.nodes, topology.links)
    assert topology.counts["switches"] == {"leaf": 2, "spine": 1, "core": 0}
    assert {n["id"]: n.get("rail") for n in topology.nodes if n["kind"] == "leaf"} == {"leaf-r0": 0, "leaf-r1": 1}
    assert {n["id"] for n in topology.nodes if n["kind"] == "nic"} == {
        f"gpu{h:03d}-nic{r}" for h in range(2) for r in range(2)
    }
    # ibsim's links train at SDR; the one at w=1 is below the fabric's 4x
    assert [(f.kind, f.entity) for f in topology.findings] == [("degraded_link", "link-gpu001-nic1")]


def test_a_cable_on_another_rails_leaf_under_ibsim_is_found(tmp_path: Path) -> None:
    found = {(f.kind, f.entity) for f in build(read(_ibnetdiscover(tmp_path, _net(moved=True)))).findings}
    assert ("wrong_rail", "gpu000-nic1") in found  # one finding: its leaf is not blamed again as "mixed"


@pytest.fixture
def lldp_fabric(tmp_path: Path) -> Iterator[Path]:
    """Two hosts and two leaves as network namespaces, host NIC r cabled (veth) to leaf r, lldpd in
    each; yields a folder with each host's `lldpcli -f json show neighbors` (and one json0)."""
    _need("lldpd", "lldpcli", "ip")
    if os.geteuid() != 0:
        pytest.fail("network namespaces need root")
    tag = f"aiops{os.getpid() % 100000}"
    spaces = [f"{tag}-gpu{h:03d}" for h in range(HOSTS)] + [f"{tag}-leaf-r{r}" for r in range(RAILS)]
    daemons: list[subprocess.Popen[bytes]] = []
    run = Path(tempfile.mkdtemp(prefix="lldp-", dir="/tmp"))  # a control socket's path is at most 107 bytes
    run.chmod(0o755)  # lldpd's unprivileged half (user _lldpd) must reach its socket

    def ip(*argv: str) -> None:
        subprocess.run(["ip", *argv], check=True, capture_output=True)

    def cli(space: str, *argv: str) -> str:
        sock = run / space / "lldpd.socket"
        done = subprocess.run(
            ["ip", "netns", "exec", space, "lldpcli", "-u", str(sock), *argv],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout

    try:
        for space in spaces:
            ip("netns", "add", space)
            ip("-n", space, "link", "set", "lo", "up")
        for h in range(HOSTS):
            for r in range(RAILS):
                a, b = f"{tag}h{h}r{r}", f"{tag}l{r}h{h}"
                ip("link", "add", a, "type", "veth", "peer", "name", b)
                ip("link", "set", a, "netns", spaces[h], "name", f"ens{r + 1}f0np0")
                ip("link", "set", b, "netns", spaces[HOSTS + r], "name", f"swp{h + 1}")
                ip("-n", spaces[h], "link", "set", f"ens{r + 1}f0np0", "up")
                ip("-n", spaces[HOSTS + r], "link", "set", f"swp{h + 1}", "up")
        for space in spaces:
            (run / space).mkdir(parents=True)
            daemons.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", space, "lldpd", "-d", "-u", str(run / space / "lldpd.socket"),
                     "-p", str(run / space / "lldpd.pid")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
        time.sleep(1.0)
        for space in spaces:
            name = space.removeprefix(f"{tag}-")
            cli(space, "configure", "system", "hostname", name)
            cli(space, "configure", "lldp", "portidsubtype", "ifname")
        for space in spaces:
            cli(space, "update")
        folder = tmp_path / "lldp"
        folder.mkdir()
        deadline = time.monotonic() + 60
        for h in range(HOSTS):
            while True:
                seen = json.loads(cli(spaces[h], "-f", "json", "show", "neighbors") or "{}")
                text = json.dumps(seen)
                if (all(f"leaf-r{r}" in text for r in range(RAILS)) and '"swp' in text) or time.monotonic() > deadline:
                    break
                time.sleep(1)
                for space in spaces:
                    cli(space, "update")
            (folder / f"gpu{h:03d}.json").write_text(json.dumps(seen))
        (tmp_path / "json0.json").write_text(cli(spaces[0], "-f", "json0", "show", "neighbors"))
        yield folder
    finally:
        for d in daemons:
            d.kill()
            d.communicate()
        for space in spaces:
            subprocess.run(["ip", "netns", "del", space], capture_output=True, check=False)
        shutil.rmtree(run, ignore_errors=True)


def test_real_lldpd_neighbours_give_the_roce_fabric(lldp_fabric: Path, tmp_path: Path) -> None:
    topology = build(fabric_from_lldp(read_neighbours(lldp_fabric)))
    TopologyGraph(topology.nodes, topology.links)
    assert {n["id"]: n.get("rail") for n in topology.nodes if n["kind"] == "leaf"} == {"leaf-r0": 0, "leaf-r1": 1}
    assert {n["id"] for n in topology.nodes if n["kind"] == "nic"} == {
        f"gpu{h:03d}-nic{r}" for h in range(2) for r in range(2)
    }
    ports = {n["id"] for n in topology.nodes if n["kind"] == "port"}
    assert ports == {f"leaf-r{r}:p{h}" for r in range(2) for h in range(2)}  # swp1 is p0
    assert topology.findings == []
    # the same host through json0, lldpd's other shape
    (tmp_path / "json0").mkdir()
    shutil.copy(tmp_path / "json0.json", tmp_path / "json0" / "gpu000.json")
    seen = {(n.interface, n.switch, n.port) for n in read_neighbours(tmp_path / "json0")}
    assert ("ens2f0np0", "leaf-r1", "swp1") in seen
