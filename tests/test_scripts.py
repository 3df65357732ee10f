"""scripts/ stays thin: every script imports the installed packages as they are (no `sys.path`
edits, no script importing another), and each answers `--help` on its own."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((REPO / "scripts").glob("*.py"))
NAMES = {path.stem for path in SCRIPTS}


def _problems(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Attribute) and node.attr == "path"
                and isinstance(node.value, ast.Name) and node.value.id == "sys"):
            found.append(f"line {node.lineno}: sys.path")
        modules = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                   else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        found += [f"line {node.lineno}: imports the script {m}" for m in modules
                  if m.split(".")[0] in NAMES | {"tests"}]
    return sorted(found)


def test_there_are_scripts_to_check():
    assert len(SCRIPTS) >= 10 and "benchmark_training" in NAMES


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_no_script_edits_sys_path_or_imports_another(path):
    assert _problems(path) == []


def test_the_check_finds_both_faults(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nsys.path.insert(0, '.')\nfrom benchmark_decoding import x\n")
    assert _problems(bad) == ["line 2: sys.path", "line 3: imports the script benchmark_decoding"]


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_every_script_answers_help(path, tmp_path):
    # run from elsewhere, the checkout's packages importable as an installed package would be
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower()


# The shell scripts that do heavy work (install, download, train, measure) when run.
SHELL_SCRIPTS = ["demo.sh", "gpu_checks.sh", "gpu_check_jax.sh", "check_floors.sh",
                 "setup_env.sh"]


@pytest.mark.parametrize("name", SHELL_SCRIPTS)
def test_every_shell_script_answers_help_before_any_work(name, tmp_path):
    """`--help` prints the script's header and nothing else happens (gpu_checks.sh ran the
    whole check, demo.sh installed and trained, check_floors.sh downloaded 1.5 GB first)."""
    script = REPO / "scripts" / name
    done = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60, env={**os.environ, "OUT": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    header = script.read_text(encoding="utf-8").splitlines()[1].lstrip("# ")
    assert done.stdout.splitlines()[0] == header and "==>" not in done.stdout
    assert list(tmp_path.iterdir()) == []  # gpu_checks.sh made $OUT/logs before anything


@pytest.mark.parametrize("name", ["demo.sh", "gpu_checks.sh"])
def test_a_shell_script_that_takes_no_such_argument_refuses_it(name, tmp_path):
    done = subprocess.run(["bash", str(REPO / "scripts" / name), "--frobnicate"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env={**os.environ, "OUT": str(tmp_path / "out")})
    assert done.returncode == 2
    assert done.stderr.strip() == (f"{name}: error: unknown argument '--frobnicate'; expected "
                                   f"{'--quick' if name == 'gpu_checks.sh' else 'none'} "
                                   "(see --help)")
    assert not (tmp_path / "out").exists()
