"""What the tests of the scripts share: finding and loading a script, checking a report.

The scripts are not a package: a user runs `python scripts/benchmarks/NAME.py`, and Python puts
the script's own folder first on `sys.path`, where the benchmarks find their helpers
(`scripts/benchmarks/_lib`). `load_script` and `benchmark_lib` do the same in a test process.
"""

import importlib
import importlib.util
import statistics
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
# The user's scripts, then the lab's: benchmarks and experiments (free to import the packages,
# never imported by them).
FOLDERS = (SCRIPTS, SCRIPTS / "benchmarks", SCRIPTS / "experiments")


def script_path(name: str) -> Path:
    """`scripts/NAME.py`, `scripts/benchmarks/NAME.py` or `scripts/experiments/NAME.py`,
    whichever exists (a script's name is unique across the three)."""
    found = [folder / f"{name}.py" for folder in FOLDERS if (folder / f"{name}.py").is_file()]
    if len(found) != 1:
        raise FileNotFoundError(f"{name}.py: expected one script of that name under "
                                f"{', '.join(str(f) for f in FOLDERS)}; found {len(found)}")
    return found[0]


def _on_path(folder: Path) -> None:
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


def load_script(name: str) -> ModuleType:
    """The script `name` (see `script_path`) as a module, its folder on `sys.path` as when it
    runs, registered in `sys.modules` under `name` (dataclasses look their module up)."""
    path = script_path(name)
    _on_path(path.parent)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def benchmark_lib(name: str) -> ModuleType:
    """`scripts/benchmarks/_lib/NAME.py` as the benchmark scripts import it (`_lib.NAME`)."""
    _on_path(SCRIPTS / "benchmarks")
    return importlib.import_module(f"_lib.{name}")


def check_serving_report(report: dict, beam_sizes: list[int]) -> None:
    """A `scripts/benchmarks/benchmark_serving.py --quick` report: both sides gave the same
    output, each figure is the median of its 3 alternating rounds and the ratio is that of the
    medians."""
    assert report["same_output"] and report["rounds"] == 3 and report["runs"] == 2
    assert "load_average_1m" in report["device"]
    assert [row["beam_size"] for row in report["results"]] == beam_sizes
    for row in report["results"]:
        assert row["same_output"] and row["savedmodel_output"] == [row["text"], row["words"]]
        for side in ("savedmodel", "keras"):
            assert len(row[f"{side}_rounds_ms"]) == 3
            assert row[f"{side}_ms"] == statistics.median(row[f"{side}_rounds_ms"])
        assert row["ratio"] == row["savedmodel_ms"] / row["keras_ms"]
