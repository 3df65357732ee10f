"""Nothing is loaded with pickle, `.keras` files load with safe mode on, and nothing turns
text into code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "captioner", "seq2seq", "scripts")

FORBIDDEN = [
    (re.compile(r"^\s*(import|from)\s+(c?pickle|dill|joblib|shelve|marshal)\b", re.M),
     "a pickle-based module"),
    (re.compile(r"allow_pickle\s*=\s*True"), "np.load(allow_pickle=True)"),
    (re.compile(r"safe_mode\s*=\s*False"), "load_model(safe_mode=False)"),
    (re.compile(r"enable_unsafe_deserialization"), "Keras unsafe deserialization"),
    (re.compile(r"\b(yaml\.load|yaml\.unsafe_load)\("), "yaml loading of objects"),
    (re.compile(r"(?<![\w.])(eval|exec)\("), "eval/exec"),
    (re.compile(r"\.read_pickle\(|torch\.load\("), "a pickle reader"),
]


def sources() -> list[Path]:
    files = [p for package in PACKAGES for p in (REPO / package).rglob("*.py")]
    assert len(files) > 20
    return files


@pytest.mark.parametrize("pattern, what", FORBIDDEN, ids=[w for _, w in FORBIDDEN])
def test_the_package_never_loads_by_pickle_or_evaluates_text(pattern, what):
    found = [f"{path.relative_to(REPO)}:{text[:m.start()].count(chr(10)) + 1}"
             for path in sources() for text in [path.read_text(encoding="utf-8")]
             for m in pattern.finditer(text)]
    assert not found, f"{what} in: {', '.join(found)}"


def test_every_keras_file_load_asks_for_safe_mode():
    calls = [(path, m) for path in sources() for text in [path.read_text(encoding="utf-8")]
             for m in re.finditer(r"load_model\(([^)]*)\)", text)]
    for path, match in calls:
        if ".keras" in match.group(1) or "keras.saving" in match.string[
                max(0, match.start() - 20):match.start()]:
            assert "safe_mode=True" in match.group(1), f"{path}: {match.group(0)}"


def test_np_load_in_the_package_refuses_pickles(tmp_path):
    import numpy as np

    # np.load's default is allow_pickle=False: an object array (a pickle inside) is refused.
    path = tmp_path / "evil.npy"
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="allow_pickle"):
        np.load(path)
    with pytest.raises(ValueError, match="allow_pickle|Python objects"):
        np.load(path, mmap_mode="r")  # as `captioner.features` reads its cache


def test_a_keras_file_with_a_lambda_is_refused_in_safe_mode(tmp_path):
    import keras

    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Lambda(lambda x: x * 2)(inputs))
    model.save(tmp_path / "lambda.keras")
    with pytest.raises(ValueError, match="(?i)unsafe|safe_mode"):
        keras.saving.load_model(tmp_path / "lambda.keras", safe_mode=True)
