"""`scripts/experiments/reference_ceiling.py`: an oracle's scores, line by line and grouped by source,
against sacreBLEU called directly; and on spa-eng's real test split."""

import json
import subprocess
import sys
from pathlib import Path

import sacrebleu

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "experiments" / "reference_ceiling.py"
LINES = [("Hi, how are you today?", "Hola, ¿cómo estás hoy?"),
         ("Run to the station now!", "¡Corre a la estación ahora!"),
         ("Hi, how are you today?", "Buenas, ¿qué tal estás hoy?"),
         ("I am reading a long book.", "Estoy leyendo un libro largo.")]


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def test_the_oracle_writes_each_sources_first_reference(tmp_path):
    data, out = tmp_path / "test.tsv", tmp_path / "ceiling.json"
    data.write_text("".join(f"{s}\t{t}\n" for s, t in LINES), encoding="utf-8")
    result = run(str(data), "--json", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(out.read_text())
    assert (report["lines"], report["sources"]) == (4, 3)
    assert report["sources_with_several_references"] == 1
    assert report["lines_with_several_references"] == 2
    oracle = [LINES[0][1], LINES[1][1], LINES[0][1], LINES[3][1]]  # line 3 gets line 1's
    line = sacrebleu.corpus_bleu(oracle, [[t for _, t in LINES]])
    assert report["line"]["bleu"] == line.score < 100
    assert report["line"]["exact_match"] == 75.0
    assert abs(report["grouped"]["bleu"] - 100) < 1e-9 and report["grouped"]["exact_match"] == 100
    assert "oracle, line" in result.stdout


def test_spa_eng_test_split_has_sources_with_several_references(shared_data, tmp_path):
    out = tmp_path / "ceiling.json"
    result = run(str(shared_data / "spa-eng" / "test.tsv"), "--json", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["lines"] == 2417 and report["sources_with_several_references"] > 0
    assert report["line"]["bleu"] < 99 and abs(report["grouped"]["bleu"] - 100) < 1e-9


def test_a_missing_file_is_one_line_and_exit_2(tmp_path):
    result = run(str(tmp_path / "nope.tsv"))
    assert result.returncode == 2 and "no such file" in result.stderr
    assert "Traceback" not in result.stderr
