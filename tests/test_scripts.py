"""scripts/ stays thin: every script imports the installed packages as they are (no `sys.path`
edits, no script importing another), and each answers `--help` on its own.

The product and the lab live apart: `scripts/` holds what a user runs, `scripts/benchmarks/`
and `scripts/experiments/` the benchmarks and one-off experiments. The lab may import the
packages; the packages and the user's scripts never import the lab, and the packages hold no
module that only the lab uses (the benchmarks' helpers live beside them, in
`scripts/benchmarks/_lib`)."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "captioner", "seq2seq")
USER_SCRIPTS = sorted((REPO / "scripts").glob("*.py"))
LAB_SCRIPTS = sorted([*(REPO / "scripts" / "benchmarks").glob("*.py"),
                      *(REPO / "scripts" / "experiments").glob("*.py")])
SCRIPTS = USER_SCRIPTS + LAB_SCRIPTS
NAMES = {path.stem for path in SCRIPTS}
IDS = [str(path.relative_to(REPO / "scripts")) for path in SCRIPTS]
LAB_HELPERS = "_lib"  # scripts/benchmarks/_lib, found beside the scripts that import it


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import statement of `path` (absolute imports only)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.append((node.lineno, node.module or ""))
    return found


def _problems(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Attribute) and node.attr == "path"
                and isinstance(node.value, ast.Name) and node.value.id == "sys"):
            found.append(f"line {node.lineno}: sys.path")
    for line, module in _imports(path):
        top = module.split(".")[0]
        if top in NAMES | {"tests"}:
            found.append(f"line {line}: imports the script {module}")
        elif top == LAB_HELPERS and not (path.parent / LAB_HELPERS).is_dir():
            found.append(f"line {line}: imports {module}, which is not beside it")
    return sorted(found)


def test_there_are_scripts_to_check():
    assert len(USER_SCRIPTS) >= 4 and len(LAB_SCRIPTS) >= 10
    assert "benchmark_training" in NAMES and "serve_client_example" in NAMES


def test_the_lab_scripts_are_not_among_the_users():
    """Benchmarks and profiles live in scripts/benchmarks/, not beside the user's tools."""
    names = {path.stem for path in USER_SCRIPTS}
    assert not [name for name in names if name.startswith(("benchmark_", "profile_"))]
    assert {path.parent.name for path in LAB_SCRIPTS} == {"benchmarks", "experiments"}


def test_a_script_name_is_unique_across_the_folders():
    """`tests.helpers.benchmarks.script_path(NAME)` finds a script by its name alone."""
    assert len(NAMES) == len(SCRIPTS)


@pytest.mark.parametrize("path", SCRIPTS, ids=IDS)
def test_no_script_edits_sys_path_or_imports_another(path):
    assert _problems(path) == []


def test_the_check_finds_every_fault(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nsys.path.insert(0, '.')\nfrom benchmark_decoding import x\n"
                   "from _lib.benchmark import alternate\n")
    assert _problems(bad) == ["line 2: sys.path", "line 3: imports the script benchmark_decoding",
                              "line 4: imports _lib.benchmark, which is not beside it"]
    (tmp_path / LAB_HELPERS).mkdir()
    assert _problems(bad) == ["line 2: sys.path", "line 3: imports the script benchmark_decoding"]


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_modules_used(root: Path, path: Path, modules: set[str]) -> set[str]:
    """The modules of `modules` that `path` imports: by import statements (relative ones
    too) or by name for a lazy import (`"seq2seq.transformer:TransformerTranslator"`,
    `common.training`'s `{"Trainer": "trainer"}`)."""
    own = _module_name(root, path) if path.relative_to(root).parts[0] in PACKAGES else ""
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package
                for _ in range(node.level - 1):
                    parent = parent.rpartition(".")[0]
                base = f"{parent}.{base}" if base else parent
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        elif own and isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value.partition(":")[0]
            names = [name, f"{package}.{name}"]
        else:
            continue
        found |= {name for name in names if name in modules}
    return found


def _lab_only_modules(root: Path) -> list[str]:
    """Package modules that the lab's scripts import and nothing else does (neither a
    package nor a user's script): they belong beside the lab."""
    files = [path for package in PACKAGES for path in (root / package).rglob("*.py")]
    modules = {_module_name(root, path) for path in files}
    lab = [*(root / "scripts" / "benchmarks").rglob("*.py"),
           *(root / "scripts" / "experiments").rglob("*.py")]
    product = files + sorted((root / "scripts").glob("*.py"))
    used = set().union(*(_package_modules_used(root, p, modules) for p in product))
    by_lab = set().union(*(_package_modules_used(root, p, modules) for p in lab))
    return sorted(by_lab - used)


def test_the_packages_hold_no_module_only_the_lab_uses():
    assert _lab_only_modules(REPO) == []


def test_the_packages_never_import_the_lab():
    files = [path for package in PACKAGES for path in (REPO / package).rglob("*.py")]
    assert len(files) > 50
    found = [f"{path.relative_to(REPO)}:{line} imports {module}" for path in files
             for line, module in _imports(path)
             if module.split(".")[0] in NAMES | {LAB_HELPERS, "scripts"}]
    assert found == []


def test_the_lab_only_check_finds_a_module_only_a_benchmark_imports(tmp_path):
    for name, text in {
        "common/__init__.py": "",
        "common/timing.py": "",
        "common/used.py": "from . import lazy\n",
        "common/lazy.py": "MAP = {'Thing': 'common.thing:Thing'}\n",
        "common/thing.py": "",
        "scripts/demo.py": "from common import used\n",
        "scripts/benchmarks/bench.py": ("from common.timing import time_steps\n"
                                        "from common import used, thing\n"),
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    for package in PACKAGES[1:]:
        (tmp_path / package).mkdir()
    assert _lab_only_modules(tmp_path) == ["common.timing"]


@pytest.mark.parametrize("path", SCRIPTS, ids=IDS)
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


@pytest.mark.parametrize("path", SCRIPTS, ids=IDS)
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


@pytest.mark.parametrize("path", SCRIPTS, ids=IDS)
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
    script = REPO / "scripts" / "benchmarks" / "benchmark_latency.py"
    done = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip() == (
        "benchmark_latency.py: error: benchmark_latency.py runs on the TensorFlow backend; got "
        "KERAS_BACKEND=jax (which only `train --prepared` and `prepare` use): run it without "
        "KERAS_BACKEND")
