"""What the tests of the benchmark scripts share: loading a script, checking its report."""

import importlib.util
import statistics
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load_script(name: str) -> ModuleType:
    """`scripts/NAME.py` as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_serving_report(report: dict, beam_sizes: list[int]) -> None:
    """A `scripts/benchmark_serving.py --quick` report: both sides gave the same output, each
    figure is the median of its 3 alternating rounds and the ratio is that of the medians."""
    assert report["same_output"] and report["rounds"] == 3 and report["runs"] == 2
    assert "load_average_1m" in report["device"]
    assert [row["beam_size"] for row in report["results"]] == beam_sizes
    for row in report["results"]:
        assert row["same_output"] and row["savedmodel_output"] == [row["text"], row["words"]]
        for side in ("savedmodel", "keras"):
            assert len(row[f"{side}_rounds_ms"]) == 3
            assert row[f"{side}_ms"] == statistics.median(row[f"{side}_rounds_ms"])
        assert row["ratio"] == row["savedmodel_ms"] / row["keras_ms"]
