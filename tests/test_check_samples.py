"""scripts/check_samples.py: the demo's last step, each sample caption judged against the scene
its image was drawn from (assets/samples/samples.json)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "check_samples.py"
SAMPLES = json.loads((REPO / "assets" / "samples" / "samples.json").read_text())
INVERSE = {"to the left of": "to the right of", "to the right of": "to the left of",
           "above": "below", "below": "above"}


def _check(lines: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT)], input="".join(lines),
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def _line(sample: dict, caption: str) -> str:
    return f"assets/samples/{sample['file']}\t{caption}\n"


@pytest.mark.parametrize("index", range(max(len(s["captions"]) for s in SAMPLES)))
def test_every_reference_caption_of_the_samples_is_right(index):
    # The samples' own reference captions are true of their scenes by construction.
    lines = [_line(s, s["captions"][min(index, len(s["captions"]) - 1)]) for s in SAMPLES]
    done = _check(lines)
    assert done.returncode == 0, done.stdout + done.stderr
    verdicts = done.stdout.splitlines()
    assert [v.rsplit("\t", 1)[-1] for v in verdicts[:-1]] == ["right"] * len(SAMPLES)
    assert verdicts[-1].startswith(f"{len(SAMPLES)} of {len(SAMPLES)} captions right")


def test_a_false_relation_a_missing_object_and_a_repeat_are_each_named():
    # The shapes_2: a triangle above a square, said the other way round and twice.
    two = next(s for s in SAMPLES if len(s["objects"]) == 2)
    true = next(c for c in two["captions"] if any(p in c for p in INVERSE))
    phrase = next(p for p in sorted(INVERSE, key=len, reverse=True) if p in true)
    swapped = true.replace(phrase, INVERSE[phrase])
    first = two["objects"][0]["category"]
    lines = [_line(two, true), _line(two, swapped), _line(two, f"a {first}"),
             _line(two, f"a {first} and a {first}")]
    done = _check(lines)
    assert done.returncode == 1
    verdicts = [v.rsplit("\t", 1)[-1] for v in done.stdout.splitlines()[:-1]]
    assert verdicts[0] == "right"
    assert verdicts[1] == "WRONG: 1 of 1 stated relations false"
    assert verdicts[2].startswith(f"WRONG: names {first}; the scene has ")
    assert "names an object twice" in verdicts[3]
    assert done.stdout.splitlines()[-1].startswith("1 of 4 captions right")


@pytest.mark.parametrize("text, message", [
    ("no tab here\n", "line 1 is not PATH<TAB>CAPTION"),
    ("photos/cat.png\ta cat\n", "photos/cat.png: no scene named cat.png"),
    ("", "no caption on standard input"),
])
def test_bad_input_is_one_line_and_exit_status_2(text, message):
    done = _check([text])
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr
