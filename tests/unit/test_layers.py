"""Layers run one way: the shared vocabulary at the bottom imports no stage; the stages do not
import the generator or the program; the root-cause engine does not pull in the predictor or
scikit-learn. Checked twice: statically (every import statement, function-level ones included,
followed through the project's own modules) and by importing each stage in a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "vocab",
    "ingest",
    "context",
    "detectors",
    "rca",
    "notify",
    "show",
    "act",
    "telemetry_gen",
    "aiops",
    "benchmarks",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


@cache
def _direct_imports(module: str) -> frozenset[str]:
    """Every module an import statement in `module` names (TYPE_CHECKING blocks excluded)."""
    tree = ast.parse(_modules()[module].read_text())
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return frozenset(found)


def _closure(module: str) -> set[str]:
    """Everything `module` can end up importing, through the project's own modules."""
    seen: set[str] = set()
    walked = {module}
    todo = [module]
    while todo:
        for name in _direct_imports(todo.pop()):
            seen.add(name)
            # importing a.b.c runs a/__init__, a/b/__init__ and a/b/c
            parts = name.split(".")
            for prefix in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):
                if prefix in _modules() and prefix not in walked:
                    walked.add(prefix)
                    todo.append(prefix)
    return seen


def _offenders(package: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    out = {}
    for module in sorted(_modules()):
        if module == package or module.startswith(package + "."):
            bad = sorted(n for n in _closure(module) if any(n == f or n.startswith(f + ".") for f in forbidden))
            if bad:
                out[module] = bad
    return out


STAGES_MUST_NOT_IMPORT = ("telemetry_gen", "aiops")


@pytest.mark.parametrize("stage", ["ingest", "context", "detectors", "rca", "notify", "show", "act"])
def test_stages_import_neither_the_generator_nor_the_program(stage: str) -> None:
    assert _offenders(stage, STAGES_MUST_NOT_IMPORT) == {}


def test_the_vocabulary_imports_no_stage_and_no_program() -> None:
    assert _offenders("vocab", ("ingest", "detectors", "rca", "notify", "telemetry_gen", "aiops")) == {}


def test_the_root_cause_engine_does_not_pull_in_the_predictor_or_scikit_learn() -> None:
    assert _offenders("rca", ("detectors.predict", "sklearn", "skops")) == {}


def test_cluster_context_reads_the_sites_tools_and_nothing_of_detection_or_root_causes() -> None:
    assert _offenders("context", ("ingest", "detectors", "rca", "notify")) == {}


def test_ingest_does_not_import_the_stages_after_it() -> None:
    assert _offenders("ingest", ("detectors", "rca")) == {}


def test_notifications_read_incident_records_not_the_stages_before_them() -> None:
    assert _offenders("notify", ("ingest", "detectors", "rca")) == {}


def test_pages_read_records_the_topology_and_telemetry_not_detection() -> None:
    # the incident page and the report draw what the engine wrote; they run no detector
    assert _offenders("show", ("detectors", "notify")) == {}


def test_actions_read_incident_records_and_policies_not_the_stages_before_them() -> None:
    # what to do is decided on the engine's records (and done through the site's tools): no
    # detector, engine or notifier is needed to act
    assert _offenders("act", ("ingest", "detectors", "rca", "notify", "show")) == {}


def test_the_generator_is_a_telemetry_source_and_nothing_more() -> None:
    # it writes the wire format with ingest's codec and frames, like a collector; it knows
    # nothing of detection, root causes or the program
    assert _offenders("telemetry_gen", ("detectors", "rca", "notify", "show", "aiops")) == {}


def test_the_walk_sees_imports_inside_functions() -> None:
    # detectors/stack/history.py imports the univariate detector inside default_drift
    assert "detectors.univariate" in _closure("detectors.stack.history")


def test_importing_the_engine_loads_no_predictor_and_no_scikit_learn() -> None:
    code = (
        "import sys, rca.incidents, rca.rank, rca.graph, rca.evaluate, rca.influx; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'skops', 'telemetry_gen', 'aiops') "
        "or m.startswith('detectors.predict')); print(bad)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert result.stdout.strip() == "[]"


# The client library itself, measured against confluent-kafka and Quix Streams: the bench that
# compares Kafka clients is the one place outside the Kafka package that may import one.
KAFKA_CLIENT_BENCH = "benchmarks.consume"


def test_only_the_kafka_package_imports_the_kafka_client() -> None:
    # the daemons, checkpoints and benches reach the broker through ingest.kafka's API
    direct = {
        module: sorted(n for n in _direct_imports(module) if n == "kafka" or n.startswith("kafka."))
        for module in _modules()
        if not (module == "ingest.kafka" or module.startswith("ingest.kafka.")) and module != KAFKA_CLIENT_BENCH
    }
    assert {m: names for m, names in direct.items() if names} == {}


@pytest.mark.parametrize("stage", ["ingest.messages", "ingest.pipeline", "detectors", "rca", "telemetry_gen.generator"])
def test_the_pure_stages_do_not_pull_in_the_kafka_client(stage: str) -> None:
    # grouping lines into messages and decoding a poll need no broker (the offline path, the tests)
    assert _offenders(stage, ("kafka", "ingest.kafka")) == {}


def _import_graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports (function-level imports included). An import
    of a module's own package is left out: Python runs a package before any module in it, so
    that edge is not a choice the module makes and closes no cycle of its own."""
    modules = _modules()

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        return next((p for i in range(len(parts), 0, -1) if (p := ".".join(parts[:i])) in modules), None)

    return {
        m: {r for n in _direct_imports(m) if (r := resolve(n)) and r != m and not m.startswith(r + ".")}
        for m in modules
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_itself_through_others() -> None:
    # the benches once imported the CLI's private settings helper while the CLI imported them: ten
    # modules in one cycle; a cycle makes import order matter and no module of it stands alone
    assert _cycles(_import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_product_does_not_import_the_benchmarks() -> None:
    # `aiops bench` is the benches' plugin (benchmarks/cli.py, an entry point the command line finds
    # when it builds its parser): nothing of the product imports them, the command line included
    product = {m for m in _modules() if not m.startswith("benchmarks")}
    assert {
        m: hits for m in sorted(product) if (hits := [n for n in _direct_imports(m) if n.startswith("benchmarks")])
    } == {}
