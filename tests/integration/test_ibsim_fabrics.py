"""Cabling findings measured the way a fabric is read: rail-optimised fat trees of a few hundred
HCAs described for Debian's `ibsim`, discovered by the real `ibnetdiscover` (infiniband-diags),
with problems injected into the description: a host's two cables swapped between the leaves of
two rails, a cable moved to another rail's leaf, an HCA missing, an HCA present but not cabled
(isolated: the subnet cannot reach it), a link trained at 1x, hosts whose HCAs carry no host
name, and single HCAs without a name (5 % of them). Each problem must be found as exactly one
finding, and nothing else reported: precision and recall 1.00 over all of them.

What ibsim cannot do, and where it is tested instead: two nodes with one GUID (ibsim refuses the
description: "new_node: node Ca guid ... already exists"; tests/unit/test_topology_import.py reads
a dump with a GUID described twice); port labels (ibnetdiscover prints port numbers only, rdma-core
infiniband-diags/ibnetdiscover.c out_switch_port; the labels are ibdiagnet's, tested on its format
in the unit tests). Switches are Quantum-2-style: 129 ports, the count a split-mode QM9700 reports
(64 ports split in two, plus port 0), hosts on the low ports and uplinks from port 65 up.
`scripts/services up` installs ibsim-utils and infiniband-diags from Debian."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from context.fabric import build
from context.ibnetdiscover import read
from rca.graph import TopologyGraph

UNNAMED = "MT4129 ConnectX7   Mellanox Technologies"  # what a ConnectX-7 says before rdma-ndd names it
UPLINK = 65  # first uplink port of a leaf


@dataclass
class Plan:
    """A rail-optimised fabric: `sus` scalable units of `hosts` nodes, `rails` HCAs a node, a leaf
    per (unit, rail), `spines` spines above every leaf. Problems to inject, and the findings each must give."""

    name: str
    sus: int
    hosts: int
    rails: int
    spines: int = 4
    naming: str = "mlx5"  # mlx5 | mixed (HCA-N on even hosts, ibp<bus>s0 on odd ones)
    swaps: list[tuple[str, int, int]] = field(default_factory=list)  # host, rail a, rail b
    moves: list[tuple[str, int, int]] = field(default_factory=list)  # host, rail, to the leaf of rail
    missing: list[tuple[str, int]] = field(default_factory=list)
    isolated: list[tuple[str, int]] = field(default_factory=list)
    narrow: list[tuple[str, int]] = field(default_factory=list)  # link trained at 1x
    nameless_hosts: list[str] = field(default_factory=list)  # every HCA without a host name
    nameless_hcas: list[tuple[str, int]] = field(default_factory=list)  # one HCA without a host name

    def host(self, su: int, n: int) -> str:
        return f"{self.name}-su{su}-n{n:02d}"

    def expected(self) -> set[tuple[str, str]]:
        out = {("crossed_cables", h) for h, _, _ in self.swaps}
        out |= {("wrong_rail", f"{h}-nic{r}") for h, r, _ in self.moves}
        out |= {("missing_hca", h) for h, _ in self.missing + self.isolated}
        out |= {("degraded_link", f"link-{h}-nic{r}") for h, r in self.narrow}
        if self.nameless_hosts or self.nameless_hcas:
            out.add(("unnamed_hcas", "fabric"))
        return out

    def problems(self) -> int:
        """Injected problems: each swap, move, missing, isolated and narrow one; unnamed HCAs are one
        (one fix: name them)."""
        lists = (self.swaps, self.moves, self.missing, self.isolated, self.narrow)
        return sum(len(x) for x in lists) + bool(self.nameless_hosts or self.nameless_hcas)

    def net(self) -> str:
        """ibsim's net format (ibnetdiscover-compatible): node id, then `# "description"`."""
        switch_ports: dict[str, list[str]] = {}
        hcas: list[str] = []
        free: dict[str, int] = {}  # a leaf's next spare host port (for moved cables)
        for su in range(self.sus):
            for r in range(self.rails):
                switch_ports[f"leaf-su{su}-r{r}"] = []
                free[f"leaf-su{su}-r{r}"] = self.hosts + 1
        for s in range(self.spines):
            switch_ports[f"spine-{s}"] = []
        swapped = {(h, a): b for h, a, b in self.swaps} | {(h, b): a for h, a, b in self.swaps}
        moved = {(h, r): to for h, r, to in self.moves}
        for su in range(self.sus):
            for n in range(self.hosts):
                host = self.host(su, n)
                for r in range(self.rails):
                    if (host, r) in self.missing:
                        continue
                    nid = f"hca-{host}-{r}"
                    if host in self.nameless_hosts or (host, r) in self.nameless_hcas:
                        desc = UNNAMED
                    elif self.naming == "mixed" and n % 2:
                        desc = f"{host} ibp{[24, 64, 155, 206, 25, 65, 156, 207][r]}s0"  # DGX H100 PCI buses
                    elif self.naming == "mixed":
                        desc = f"{host} HCA-{r + 1}"
                    else:
                        desc = f"{host} mlx5_{r}"
                    if (host, r) in self.isolated:
                        hcas.append(f'Hca\t1\t"{nid}"\t# "{desc}"\n')
                        continue
                    to = swapped.get((host, r), moved.get((host, r), r))
                    leaf = f"leaf-su{su}-r{to}"
                    if (host, r) in moved:
                        port = free[leaf]
                        free[leaf] += 1
                    else:
                        port = n + 1
                    width = "\tw=1" if (host, r) in self.narrow else ""
                    switch_ports[leaf].append(f'[{port}]\t"{nid}"[1]{width}')
                    hcas.append(f'Hca\t1\t"{nid}"\t# "{desc}"\n[1]\t"{leaf}"[{port}]{width}\n')
        for k, leaf in enumerate(name for name in switch_ports if name.startswith("leaf-")):
            for s in range(self.spines):  # every leaf to every spine (a two-tier fat tree)
                switch_ports[leaf].append(f'[{UPLINK + s}]\t"spine-{s}"[{k + 1}]')
                switch_ports[f"spine-{s}"].append(f'[{k + 1}]\t"{leaf}"[{UPLINK + s}]')
        switches = [
            f'Switch\t129\t"{name}"\t# "{name}"\n' + "\n".join(ports) + "\n" for name, ports in switch_ports.items()
        ]
        return "\n".join([*switches, *hcas])


def _ibnetdiscover(folder: Path, net: str, *flags: str) -> Path:
    """ibsim serving `net`, and the real ibnetdiscover through ibsim's umad2sim preload. ibsim's
    socket is an abstract one (`sim:ctl`), one per network namespace: as root the pair runs in a
    namespace of its own, so that fabric tests running at once do not meet."""
    missing = [t for t in ("ibsim", "ibsim-run", "ibnetdiscover") if shutil.which(t) is None]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not installed: scripts/services up installs ibsim-utils and infiniband-diags"
        )
    (folder / "net").write_text(net)
    written = folder / ("fabric-p.txt" if flags else "fabric.txt")
    script = (
        'ibsim -n -s "$1" >"$2.sim.log" 2>&1 & sim=$!; shift 2; '
        "for _ in $(seq 60); do sleep 1; "  # ibsim parses the net and opens its socket: wait for it
        'ibsim-run ibnetdiscover "$@" >"$OUT" 2>/dev/null && grep -q "^C[Aa][[:space:]]" "$OUT" && break; '
        'kill -0 $sim 2>/dev/null || break; done; kill $sim; grep -q "^C[Aa][[:space:]]" "$OUT"'
    )
    isolate = ["unshare", "--net"] if os.geteuid() == 0 and shutil.which("unshare") else []
    done = subprocess.run(
        [*isolate, "bash", "-c", script, "ibsim", str(folder / "net"), str(written), *flags],
        env={**os.environ, "OUT": str(written)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        log = Path(f"{written}.sim.log")
        pytest.fail(f"ibsim did not serve the fabric: {log.read_text()[-2000:] if log.exists() else done.stderr}")
    return written


def _plans() -> list[Plan]:
    a = Plan("a", sus=2, hosts=16, rails=8)  # 256 HCAs, mlx5_N
    a.swaps = [(a.host(0, 3), 2, 5), (a.host(1, 11), 0, 7)]
    a.moves = [(a.host(0, 9), 4, 1), (a.host(1, 2), 6, 3)]
    a.missing = [(a.host(1, 5), 3)]
    a.isolated = [(a.host(0, 14), 1)]
    a.narrow = [(a.host(1, 8), 2)]
    a.nameless_hcas = [(a.host(su, n), (n + su) % 8) for su in range(2) for n in range(0, 16, 3)]  # 12: ~5 %
    b = Plan("b", sus=4, hosts=20, rails=4)  # 320 HCAs, mlx5_N, two hosts wholly unnamed
    b.swaps = [(b.host(2, 7), 1, 2)]
    b.moves = [(b.host(3, 0), 0, 3), (b.host(0, 19), 2, 0)]
    b.missing = [(b.host(1, 4), 0), (b.host(3, 12), 2)]
    b.isolated = [(b.host(2, 15), 3)]
    b.narrow = [(b.host(0, 1), 1)]
    b.nameless_hosts = [b.host(1, 9), b.host(3, 17)]
    b.nameless_hcas = [(b.host(su, n), n % 4) for su in range(4) for n in (5, 13)]
    c = Plan("c", sus=3, hosts=24, rails=4, naming="mixed")  # 288 HCAs, HCA-N and ibp<bus>s0 mixed
    c.swaps = [(c.host(0, 6), 0, 3), (c.host(2, 13), 1, 2)]  # one host of each naming
    c.moves = [(c.host(1, 21), 3, 0)]
    c.missing = [(c.host(2, 2), 1)]
    c.isolated = [(c.host(0, 17), 2)]
    c.narrow = [(c.host(1, 10), 0)]
    c.nameless_hcas = [(c.host(su, n), (n + 1) % 4) for su in range(3) for n in (4, 11, 19)]
    return [a, b, c]


def test_injected_cabling_problems_on_three_ibsim_fabrics_are_found_exactly(tmp_path: Path) -> None:
    found_all: set[tuple[str, str, str]] = set()
    expected_all: set[tuple[str, str, str]] = set()
    problems = 0
    for plan in _plans():
        folder = tmp_path / plan.name
        folder.mkdir()
        dump = _ibnetdiscover(folder, plan.net())
        topology = build(read(dump))
        TopologyGraph(topology.nodes, topology.links)
        assert topology.counts["rail_optimised"] and topology.counts["rails"] == plan.rails, plan.name
        found_all |= {(plan.name, f.kind, f.entity) for f in topology.findings}
        expected_all |= {(plan.name, k, e) for k, e in plan.expected()}
        problems += plan.problems()
        # HCAs without a name whose host the cabling tells are placed on it, with the right rail
        nics = {n["id"] for n in topology.nodes if n["kind"] == "nic"}
        assert {f"{h}-nic{r}" for h, r in plan.nameless_hcas} <= nics, plan.name
        assert not any(n.startswith(h) for h in plan.nameless_hosts for n in nics), plan.name
        assert len(topology.findings) == len({(f.kind, f.entity) for f in topology.findings})  # one each
        # every problem quotes the dump's lines that made it, as `file:line: the line`
        lines = dump.read_text().splitlines()
        for f in topology.findings:
            if f.kind == "unnamed_hcas":
                continue  # a note: where each unnamed HCA is, not lines
            assert f.evidence, (f.kind, f.entity)
            for quote in f.evidence:
                where, number, text = quote.split(":", 2)
                assert where == str(dump) and lines[int(number) - 1].strip()[:200] == text[1:], quote
            if f.kind == "missing_hca":  # its HCAs' blocks: the node lines that name the host
                assert sum(f'# "{f.entity} ' in q for q in f.evidence) == plan.rails - 1, f.entity
    hits = found_all & expected_all
    precision, recall = len(hits) / len(found_all), len(hits) / len(expected_all)
    assert problems == 23  # docs/cluster-context.md says 23 (8 + 8 + 7); the issue asks at least 20
    assert (precision, recall) == (1.0, 1.0), (sorted(found_all - expected_all), sorted(expected_all - found_all))


def test_the_report_names_the_swap_first_and_the_unnamed_hcas_in_one_line(tmp_path: Path) -> None:
    """5 % of HCAs without a name, one host's two cables swapped: the swap is the first finding,
    the unnamed HCAs one, and the command's first screen says so (both of ibnetdiscover's formats)."""
    from aiops.cli import main

    plan = Plan("d", sus=2, hosts=16, rails=8)
    plan.swaps = [(plan.host(1, 6), 1, 6)]
    plan.nameless_hcas = [(plan.host(su, n), (3 * n + su) % 8) for su in range(2) for n in range(0, 16, 3)]
    for flags in ((), ("-p",)):
        fabric = _ibnetdiscover(tmp_path, plan.net(), *flags)
        report = build(read(fabric)).report()
        assert [f["kind"] for f in report["findings"]] == ["crossed_cables", "unnamed_hcas"]
        swap = report["findings"][0]
        assert (
            swap["entity"] == plan.host(1, 6) and "leaf-su1-r1" in swap["message"] and "leaf-su1-r6" in swap["message"]
        )
        assert len(swap["evidence"]) >= 2  # the two cables' lines of the dump
        assert report["summary"] == {"problems": {"crossed_cables": 1}, "notes": {"unnamed_hcas": 1}}
    out = tmp_path / "screen.txt"
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["topology", "import", "--ibnetdiscover", str(fabric), "--out", str(tmp_path / "t.json")]) == 0
    screen = buffer.getvalue().splitlines()
    out.write_text("\n".join(screen))
    first = [line for line in screen if line.lstrip().startswith("1.")]
    assert first and "crossed_cables" in first[0]
    assert sum("unnamed_hcas" in line for line in screen[:24]) >= 1 and len(screen) <= 24


IBSIM_EXAMPLES = (
    Path(__file__).resolve().parents[3]
    / "shared"
    / "datasets"
    / "real-formats"
    / "ibnetdiscover"
    / "ibsim_net_examples"
)


def test_ibsims_own_example_fabrics_import_once_discovered(tmp_path: Path) -> None:
    """The shared folder's ibsim net files are ibsim's input, not a dump (the import refuses them
    with what to run instead: tests/unit/test_topology_import.py). Served by ibsim and discovered
    by the real ibnetdiscover, as a site would, each imports: every switch and every HCA the net
    file declares is in the topology, and the only finding is the note that its HCAs name no host."""
    nets = sorted(p for p in IBSIM_EXAMPLES.glob("net*") if p.is_file())
    assert len(nets) == 5
    for net in nets:
        text = net.read_text()
        declared = {
            kind: sum(1 for line in text.splitlines() if line.split(None, 1)[:1] == [kind])
            for kind in ("Switch", "Hca")
        }
        folder = tmp_path / net.name
        folder.mkdir()
        topology = build(read(_ibnetdiscover(folder, text)))
        TopologyGraph(topology.nodes, topology.links)
        kinds = [n["kind"] for n in topology.nodes]
        switches = sum(kinds.count(k) for k in ("leaf", "spine", "switch"))
        assert switches == declared["Switch"], net.name
        assert kinds.count("nic") == declared["Hca"], (net.name, [f.message for f in topology.findings][:5])
        # ibsim's HCAs are named "Hca1" and the like, no host: one note says so, nothing else
        assert [f.kind for f in topology.findings] == ["unnamed_hcas"], net.name
