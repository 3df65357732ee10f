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


def _parses_with_the_project_parser(path: Path) -> list[str]:
    """What keeps `path` from parsing through `common.cli.Parser` and `run_cli` (one-line
    errors with exit status 2, `UserError`s as one line, TensorFlow's start-up lines hidden)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    called = {node.func.id if isinstance(node.func, ast.Name) else node.func.attr
              for node in ast.walk(tree) if isinstance(node, ast.Call)
              and isinstance(node.func, (ast.Name, ast.Attribute))}
    missing = [name for name in ("Parser", "run_cli") if name not in called]
    if "ArgumentParser" in called:
        missing.append("uses argparse.ArgumentParser")
    return missing


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_every_script_parses_with_the_project_parser(path):
    assert _parses_with_the_project_parser(path) == []


def test_the_parser_check_finds_plain_argparse(tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text("import argparse\np = argparse.ArgumentParser()\np.parse_args()\n")
    assert _parses_with_the_project_parser(plain) == ["Parser", "run_cli",
                                                      "uses argparse.ArgumentParser"]


def _run_script(path: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "0"}
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_every_script_refuses_an_unknown_option_in_one_line(path, tmp_path):
    """No usage block, no traceback, no TensorFlow log lines: one line (naming the option, or
    the required arguments missing, which argparse checks first)."""
    done = _run_script(path, "--frobnicate", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith(f"{path.name}: error: ")
    assert "--frobnicate" in lines[0] or "required" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_a_tensorflow_script_under_the_jax_backend_is_one_line(tmp_path):
    """`run_cli` named the sub-command, which a script without sub-commands has not: an
    AttributeError traceback."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "KERAS_BACKEND": "jax"}
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "benchmark_latency.py"),
                           "--quick"], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip() == (
        "benchmark_latency.py: error: benchmark_latency.py runs on the TensorFlow backend; got "
        "KERAS_BACKEND=jax (which only `train --prepared` and `prepare` use): run it without "
        "KERAS_BACKEND")
