"""The command line's papercuts (issue 50): each bad argument refused in one line that says what to
change, before the command imports its stage; every import of a command declared by its extra."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from aiops.cli import main

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "pandas", "sklearn", "numba", "pyarrow")


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("aiops: ") and "\n" not in err
    return err


def test_run_on_a_missing_folder_names_it_and_the_command_that_makes_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _refused(["run", "--input", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")], capsys)
    assert "no such folder" in err and "aiops gen --out" in err and "--interval" not in err
    (tmp_path / "empty").mkdir()
    err = _refused(["detect", "--input", str(tmp_path / "empty"), "--out", str(tmp_path / "o")], capsys)
    assert "no telemetry.lp" in err


def test_a_bad_argument_is_refused_before_the_heavy_imports(tmp_path: Path) -> None:
    """Rejecting took 3-10 s when NumPy, pandas, scikit-learn and numba were imported first."""
    code = (
        "import sys; from aiops.cli import main; "
        f"rc = main(['run', '--input', {str(tmp_path / 'nowhere')!r}, '--out', {str(tmp_path)!r}]); "
        f"print(rc, sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.split("\n")[0] == "2 []"


def test_gen_refuses_a_folder_that_is_not_empty_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = tmp_path / "notes.txt"
    kept.write_text("mine\n")
    err = _refused(["gen", "--out", str(tmp_path), "--gpus", "8", "--hours", "0.05"], capsys)
    assert "not empty" in err and "--force" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert main(["gen", "--out", str(tmp_path), "--gpus", "8", "--hours", "0.05", "--force"]) == 0
    assert (tmp_path / "telemetry.lp").is_file()


def test_gen_says_what_to_change_when_the_faults_do_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(
        ["gen", "--kafka", "127.0.0.1:1", "--gpus", "16", "--hours", "0.3", "--faults", "gpu_lost=9"], capsys
    )
    assert "no free place" in err and "--gpus" in err and "--hours" in err and "--faults" in err


@pytest.mark.parametrize("url", ["htp://example.org/hook", "example.org/hook", "https://"])
def test_a_receiver_url_its_kind_cannot_post_to_is_refused_at_load(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`htp://...` passed, retried for 30 s and exited 0 having sent nothing."""
    config = tmp_path / "notify.yml"
    config.write_text(json.dumps({"receivers": [{"name": "ops", "kind": "webhook", "url": url}], "routes": []}))
    folder = tmp_path / "cluster"
    folder.mkdir()
    (folder / "telemetry.lp").write_text("")
    for argv in (
        ["run", "--input", str(folder), "--out", str(tmp_path / "o"), "--notify-config", str(config)],
        ["demo", "--no-predict", "--notify-config", str(config)],
    ):
        err = _refused(argv, capsys)
        assert "'ops'" in err and "http:// or https://" in err


def test_the_example_notify_config_passes_the_checks(capsys: pytest.CaptureFixture[str]) -> None:
    from aiops.cli.checks import receiver_url_problems
    from notify.config import load

    assert receiver_url_problems(load(ROOT / "config" / "notify.example.yml")) == []


def test_a_missing_events_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topology = tmp_path / "topology.json"
    topology.write_text("{}")
    missing = tmp_path / "events.jsonl"
    for argv in (
        ["run", "--kafka", "127.0.0.1:1", "--topology", str(topology), "--events", str(missing)],
        ["detect", "--kafka", "127.0.0.1:1", "--events", str(missing)],
    ):
        err = _refused(argv, capsys)
        assert str(missing) in err and "no such file" in err


def _third_party_imports(path: Path) -> set[str]:
    ours = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    tree = ast.parse(path.read_text())
    optional = {  # `try: import x / except ImportError:` -- measured when installed, not needed
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.Try)
        and any(isinstance(h.type, ast.Name) and h.type.id == "ImportError" for h in node.handlers)
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    names: set[str] = set()
    optional_names: set[str] = set()
    for node in ast.walk(tree):
        found = names if id(node) not in optional else optional_names
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return {n for n in names - optional_names if n not in sys.stdlib_module_names and n not in ours}


def _requirement_names(requirements: list[str]) -> set[str]:
    import re

    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def test_every_import_of_the_bench_commands_is_declared_by_the_bench_extra() -> None:
    """`aiops bench scale` died with a traceback in an install with the bench extra: bench_soak.py
    imports requests, which only the dev extra declared."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _requirement_names(project["dependencies"] + project["optional-dependencies"]["bench"])
    distributions = packages_distributions()
    undeclared = {}
    benches = sorted((ROOT / "benchmarks").glob("*.py"))
    assert len(benches) > 5, "the benches moved: point this test at where they are"
    for path in benches:
        for module in _third_party_imports(path):
            dists = {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
            if not dists & declared:
                undeclared[path.name] = module
    assert undeclared == {}


# the production packages a base install serves (`pip install aiops-gpu`), and the modules that
# need an extra, which say so when it is missing
PRODUCTION = ("vocab", "aiops", "ingest", "context", "detectors", "rca", "notify", "show", "act", "telemetry_gen")
NEEDS_EXTRA = {"notify/apprise_send.py": "apprise"}


def test_every_import_of_the_production_packages_is_declared_by_the_base_install() -> None:
    """An import that works only because another package happens to bring it (requests through
    grafana-client) breaks when that package changes: what the code imports, the project declares."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = _requirement_names(project["dependencies"])
    distributions = packages_distributions()
    undeclared = {}
    for package in PRODUCTION:
        for path in sorted((ROOT / package).rglob("*.py")):
            where = str(path.relative_to(ROOT))
            declared = base | _requirement_names(project["optional-dependencies"].get(NEEDS_EXTRA.get(where, ""), []))
            for module in _third_party_imports(path):
                dists = {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
                if not dists & declared:
                    undeclared[where] = module
    assert undeclared == {}
