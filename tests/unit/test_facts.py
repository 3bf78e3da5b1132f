"""One owner per fact (issue 67): an entity id is built and cut apart only in vocab/ids.py (with
vocab/entities.py, the id index), and each of these facts is defined once, where its rule lives:
"busy" and "working" (vocab/thresholds.py), the least lead a prediction is counted from
(vocab/thresholds.py), and every bound on what the service reads (vocab/bounds.py).

Read from the code by an AST walk over the product's packages (the tests are not the product). The
generator (telemetry_gen) builds its ids through the same constructors and is walked too; it keeps
its own "busy" only where it means something else: the realism comparison's compute-bound samples
of the recording (telemetry_gen/recording.py BUSY_UTIL, 90 %), a property of the recording the
generator is measured against, not a rule the service applies.

Failed before: `-gpu` surgery in vocab/schedule.py, rca/blast.py, ingest/remote_write.py,
context/inventory.py, aiops/recording_check.py and benchmarks/hostile.py; BUSY_UTIL_PCT in
detectors/detect_loop.py and detectors/predict/features.py; MAX_GPUS_PER_NODE in vocab/schedule.py
and context/bounds.py; MIN_LEAD_S in detectors/predict/online.py.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from functools import cache

import pytest

from tests.unit.test_layers import PACKAGES, ROOT  # the product's packages, as the layers test walks them

ID_OWNERS = {"vocab/ids.py", "vocab/entities.py"}

# The scheme's parts (vocab/ids.py): a suffix after a node, a NIC or a rack, or the cable's prefix.
_SUFFIX = r"-(?:gpu|nic|optic|nvsw|psu|cdu)(?![a-z])"
_PREFIX = r"(?<![a-z])link-"
_ENDS_WITH_PART = re.compile(rf"(?:{_SUFFIX}|{_PREFIX})$")  # a piece that an interpolated value follows
_STARTS_WITH_PART = re.compile(rf"^{_SUFFIX}")  # a piece that follows an interpolated value
_ANY_PART = re.compile(rf"{_SUFFIX}|{_PREFIX}")
_TEMPLATE_PART = re.compile(rf"(?:{_SUFFIX}|{_PREFIX})(?:%|\{{)|(?:%\w|\}})(?:{_SUFFIX})")
_CUTTERS = {
    "split",
    "rsplit",
    "partition",
    "rpartition",
    "startswith",
    "endswith",
    "removeprefix",
    "removesuffix",
    "find",
    "rfind",
    "index",
    "rindex",
    "replace",
    "count",
}
_REGEX = {"compile", "match", "search", "fullmatch", "findall", "finditer", "sub", "subn", "split"}


def _text(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def id_surgery(source: str) -> Iterator[tuple[int, str]]:
    """(line, what) for each place `source` spells an entity id from its parts or cuts one apart."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            parts = node.values
            for i, part in enumerate(parts):
                text = _text(part)
                if text is None:
                    continue
                after = i + 1 < len(parts) and isinstance(parts[i + 1], ast.FormattedValue)
                before = i > 0 and isinstance(parts[i - 1], ast.FormattedValue)
                if (after and _ENDS_WITH_PART.search(text)) or (before and _STARTS_WITH_PART.search(text)):
                    yield node.lineno, f"an f-string builds an id: {ast.unparse(node)[:80]}"
                    break
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            for side in (node.left, node.right):
                text = _text(side)
                if text is not None and (_ENDS_WITH_PART.search(text) or _STARTS_WITH_PART.search(text)):
                    yield node.lineno, f"concatenation builds an id: {ast.unparse(node)[:80]}"
                    break
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            text = _text(node.left)
            if text is not None and _TEMPLATE_PART.search(text):
                yield node.lineno, f"a %-template builds an id: {text[:80]!r}"
        elif isinstance(node, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
            text = _text(node.left)
            if text is not None and _ANY_PART.search(text):
                yield node.lineno, f"a membership test reads an id's spelling: {ast.unparse(node)[:80]}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr, texts = node.func.attr, [t for a in node.args if (t := _text(a)) is not None]
            receiver = node.func.value
            if attr == "format" and (text := _text(receiver)) is not None and _TEMPLATE_PART.search(text):
                yield node.lineno, f"str.format builds an id: {text[:80]!r}"
            elif attr in _CUTTERS and any(_ANY_PART.search(t) for t in texts):
                yield node.lineno, f"{attr} cuts an id apart: {ast.unparse(node)[:80]}"
            elif (
                attr in _REGEX
                and isinstance(receiver, ast.Name)
                and receiver.id == "re"
                and texts
                and _ANY_PART.search(texts[0])
            ):
                yield node.lineno, f"a regex reads an id's spelling: {texts[0][:80]!r}"


@cache
def _product() -> dict[str, str]:
    """Every module of the product: its path (relative to the root) and its source."""
    return {
        p.relative_to(ROOT).as_posix(): p.read_text() for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
    }


def test_no_module_but_vocab_ids_spells_an_entity_id() -> None:
    found = [
        f"{path}:{line}: {what}"
        for path, source in _product().items()
        if path not in ID_OWNERS
        for line, what in id_surgery(source)
    ]
    assert not found, "build or read ids through vocab/ids.py (gpu_id, gpu_index, ...):\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        'gpu = f"{node}-gpu{i}"',
        'line = f"gpu,gpu=n{node:05d}-gpu{k},node=n{node:05d}"',
        'suffix = f"-gpu{gpu}"',
        'optic = f"{nic}-optic"',
        'link = f"link-{nic}"',
        'psu = f"{d.name}-psu{k}"',
        'tag = node + "-gpu" + gpu',
        'GPU_INDEX = re.compile(r"-gpu(\\d+)$")',
        'node, _, idx = entity.partition("-gpu")',
        'ok = "-gpu" not in entity',
        'gpu = "%s-gpu%d" % (node, i)',
        'gpu = "{}-gpu{}".format(node, i)',
        'node = gpu.rsplit("-gpu", 1)[0]',
    ],
)
def test_the_walk_finds_each_way_of_spelling_an_id(source: str) -> None:
    assert list(id_surgery(source))


@pytest.mark.parametrize(
    "source",
    [
        'raise CliError(f"--gpus must be a positive multiple of {GPUS_PER_NODE}, got {gpus}")',
        'RECORDING = ROOT / "shared" / "datasets" / "real-gpu" / "h200" / "nvml-1s.csv"',
        'tags = (("gpu", "GPU id, e.g. n00012-gpu3"), ("node", "node id"))',
        'image = f"{registry}/aiops-gpu:{tag}"',
        'p.add_argument("--gpus", type=int, default=1024)',
        'name = f"{prefix}-gpus-{n}"',
    ],
)
def test_prose_that_names_a_gpu_is_not_surgery(source: str) -> None:
    assert not list(id_surgery(source))


# --- one definition each ---------------------------------------------------------------------

THRESHOLDS = "vocab/thresholds.py"
BOUNDS = "vocab/bounds.py"
# Facts that are not bounds, each with its one owner. A module-level name of a watched kind (below)
# must be one of these or a bound, defined in its owner only.
OWNED = {
    "GPU_UTIL_FIELD": THRESHOLDS,
    "BUSY_UTIL_PCT": THRESHOLDS,
    "WORKING_UTIL_PCT": THRESHOLDS,
    "MIN_USEFUL_LEAD_S": THRESHOLDS,
    # the predictor stays silent on a failure expected sooner than this: another fact than the
    # lead a view counts from (vocab/thresholds.py says both)
    "MIN_EMIT_LEAD_S": "detectors/predict/online.py",
}
# Names that say they are one of these facts.
WATCHED = {
    "busy or working": re.compile(r"BUSY|WORKING|GPU_UTIL"),
    "the least useful lead": re.compile(r"^MIN_\w*LEAD"),
    "a bound": re.compile(r"^MAX_\w*(?:LENGTH|PER_NODE|PER_DOCUMENT|HOSTS|NODES|INDEX|PORT|DEPTH|DEVICES|FILES)$"),
}
# The generator keeps its own "busy" (this module's docstring says why).
NOT_WATCHED = {("busy or working", "telemetry_gen/")}
# Files other hands hold this round, and the change each waits for (issue 67). An entry no longer
# needed fails the test below, so the list only shrinks.
WAITING: dict[tuple[str, str], str] = {}


def module_names(source: str) -> Iterator[str]:
    """The names a module binds by assignment at its top level (in top-level if/try/with too)."""
    todo: list[ast.stmt] = list(ast.parse(source).body)
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, ast.Assign):
            targets = list(stmt.targets)
            while targets:
                target = targets.pop()
                if isinstance(target, ast.Name):
                    yield target.id
                elif isinstance(target, ast.Tuple | ast.List):
                    targets.extend(target.elts)
                elif isinstance(target, ast.Starred):
                    targets.append(target.value)
        elif isinstance(stmt, ast.AnnAssign | ast.AugAssign) and isinstance(stmt.target, ast.Name):
            yield stmt.target.id
        elif isinstance(stmt, ast.If | ast.Try | ast.With):
            for block in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(stmt, block, []):
                    todo.extend(child.body if isinstance(child, ast.ExceptHandler) else [child])


@cache
def _bounds() -> frozenset[str]:
    return frozenset(n for n in module_names(_product()[BOUNDS]) if n.startswith("MAX_"))


def _definitions() -> dict[str, list[str]]:
    where: dict[str, list[str]] = defaultdict(list)
    for path, source in _product().items():
        for name in set(module_names(source)):
            where[name].append(path)
    return where


def _owner(name: str) -> str | None:
    return BOUNDS if name in _bounds() else OWNED.get(name)


def _watched(name: str, path: str) -> bool:
    """Does the name say it is one of the watched facts (where that kind is watched)?"""
    return any(
        pattern.search(name) and not any(k == kind and path.startswith(p) for k, p in NOT_WATCHED)
        for kind, pattern in WATCHED.items()
    )


def _misplaced() -> set[tuple[str, str]]:
    """(path, name): a fact defined away from its owner, or a watched name that has no owner."""
    out = set()
    for name, paths in _definitions().items():
        owner = _owner(name)
        for path in paths:
            if (owner is not None and path != owner) or (owner is None and _watched(name, path)):
                out.add((path, name))
    return out


def test_each_fact_is_defined_once_where_its_rule_lives() -> None:
    found = _misplaced() - set(WAITING)
    shown = [f"{path}: {name} (the owner: {_owner(name) or 'none yet: give it one'})" for path, name in sorted(found)]
    assert not found, "import these from their owner instead:\n" + "\n".join(shown)


def test_every_waiting_change_is_still_needed() -> None:
    done = set(WAITING) - _misplaced()
    assert not done, f"done, take them out of WAITING: {sorted(done)}"


def test_the_owned_facts_and_bounds_are_where_the_table_says() -> None:
    defined = _definitions()
    assert {"MAX_GPUS_PER_NODE", "MAX_HOSTS", "MAX_ID_LENGTH", "MAX_NODE_LENGTH"} <= _bounds()
    for name in [*OWNED, *_bounds()]:
        assert _owner(name) in defined[name], name


def test_the_settings_that_read_working_default_to_it() -> None:
    """The two site settings that judge "working" start from the one value (a site may still set each)."""
    from vocab.thresholds import WORKING_UTIL_PCT, PeerThresholds, RuleThresholds

    assert PeerThresholds().busy_util_pct == RuleThresholds().pcie_busy_util_pct == WORKING_UTIL_PCT
    source = _product()[THRESHOLDS]
    literal = re.findall(r"(\w*busy_util\w*): float = sourced\(\s*([\d.]+)", source)
    assert not literal, f"a number where WORKING_UTIL_PCT or BUSY_UTIL_PCT belongs: {literal}"
