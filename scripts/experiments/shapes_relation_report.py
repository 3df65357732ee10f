"""Where a `shapes` captioner's spatial relations go wrong, by the number of objects.

    python scripts/experiments/shapes_relation_report.py runs/demo --beam-size 3 --json report.json

Three views of the test split:
- generated captions (beam search): per object count, how many captions name exactly the
  image's objects, how many relations they state, how many of those name an object that is
  not there, and among the rest how many have the right axis (side by side vs one above the
  other) and the right relation;
- teacher forcing on the reference captions of two-object images: how often the model prefers
  the right direction word ("left" over "right", "above" over "below" or the reverse) at the
  position where the reference says it, which separates knowing the answer from decoding it;
- where the attention is, under teacher forcing on the same captions, at the step that says
  the first-named object's shape word: the mass inside that object's box and inside the other
  object's box. A decoder that knows which object it is describing looks at that one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from common.cli import HelpFormatter, Parser, positive_int, run_cli
from common.errors import UserError
from common.outputs import check_output_file, reported_write

# What the report holds: an existing --json is replaced only when it is an earlier report.
RESULT_KEYS = ("run_dir", "beam_size", "generated")
OPPOSITE = {"left": "right", "right": "left", "above": "below", "below": "above"}
AXIS = {"left": "side by side", "right": "side by side", "above": "stacked", "below": "stacked"}


def generated_breakdown(run, test, beam_size: int, batch_size: int = 100) -> dict:
    import numpy as np

    from captioner.datasets.shapes import spatial_relation
    from captioner.datasets.shapes_metrics import objects_correct, parse_caption

    images = np.stack([r.image for r in test]).astype("float32")
    captions = []
    for start in range(0, len(images), batch_size):
        captions += [c.text for c in run.caption_batch(images[start:start + batch_size],
                                                       beam_size=beam_size)]
    counts: dict[int, Counter] = {}
    for record, caption in zip(test, captions):
        c = counts.setdefault(len(record.objects), Counter())
        c["images"] += 1
        c["objects_right"] += objects_correct(caption, record.objects)
        parsed = parse_caption(caption)
        by_name = {(o.attributes["colour"], o.attributes["shape"]): o for o in record.objects}
        for i, relation, j in parsed.relations:
            c["relations"] += 1
            a = by_name.get((parsed.objects[i].colour, parsed.objects[i].shape))
            b = by_name.get((parsed.objects[j].colour, parsed.objects[j].shape))
            if a is None or b is None:
                c["missing_object"] += 1
                continue
            truth = spatial_relation(a, b)
            c["both_present"] += 1
            c["right_axis"] += AXIS[truth] == AXIS[relation]
            c["right_relation"] += truth == relation
    return {str(n): dict(c) for n, c in sorted(counts.items())}


def teacher_forced(run, test) -> list:
    """The model's outputs under teacher forcing on every reference caption of the two-object
    images: `(record, words, logits (T, V), alpha (T, L))`, output step t saying `words[t]`
    (captions longer than the decoder's `max_length` are cut there)."""
    import numpy as np

    vocab = run.vocab
    max_length = run.config.decoder.max_length
    forced = []
    for record in test:
        if len(record.objects) != 2:
            continue
        for caption in record.captions:
            words = caption.split()
            tokens = [vocab.start_id] + vocab.encode(words)
            caption_in = np.zeros((1, max_length), np.int32)
            caption_in[0, :min(len(tokens), max_length)] = tokens[:max_length]
            outputs = run.model({"image": record.image[None].astype("float32"),
                                 "caption_in": caption_in}, training=False)
            forced.append((record, words, outputs["logits"].numpy()[0],
                           outputs["alpha"].numpy()[0]))
    return forced


def teacher_forced_directions(run, test, forced=None) -> dict:
    """How often the right direction word beats its opposite (`forced`: `teacher_forced`'s
    result, computed when not given)."""
    vocab = run.vocab
    max_length = run.config.decoder.max_length
    ids = {w: vocab.encode([w])[0] for w in OPPOSITE}
    right = Counter()
    total = Counter()
    for _, words, logits, _ in forced if forced is not None else teacher_forced(run, test):
        for t, word in enumerate(words[:max_length]):
            if word in OPPOSITE and t > 0:
                axis = AXIS[word]
                total[axis] += 1
                right[axis] += logits[t, ids[word]] > logits[t, ids[OPPOSITE[word]]]
    return {axis: {"right": int(right[axis]), "total": total[axis],
                   "share": right[axis] / total[axis] if total[axis] else None}
            for axis in ("side by side", "stacked")}


def teacher_forced_attention(run, test, forced=None) -> dict:
    """Mean attention mass on the first-named object and on the other one at the step that
    says the first object's shape, over the reference captions of two-object images that fit
    the decoder's `max_length` (`forced` as for `teacher_forced_directions`)."""
    import numpy as np

    from captioner.datasets.shapes_metrics import parse_caption
    from common.metrics.attention_correctness import region_fractions

    max_length = run.config.decoder.max_length
    grid = run.grid_shape
    named, other = [], []
    for record, words, _, alpha in forced if forced is not None else teacher_forced(run, test):
        parsed = parse_caption(" ".join(words))
        if len(parsed.objects) != 2 or len(words) > max_length:
            continue
        by_name = {(o.attributes["colour"], o.attributes["shape"]): o for o in record.objects}
        first = by_name[(parsed.objects[0].colour, parsed.objects[0].shape)]
        second = by_name[(parsed.objects[1].colour, parsed.objects[1].shape)]
        step = words.index(parsed.objects[0].shape)
        attention = alpha[step].reshape(grid)
        size = (record.height, record.width)
        named.append(float((attention * region_fractions([first.box], size, grid)).sum()))
        other.append(float((attention * region_fractions([second.box], size, grid)).sum()))
    if not named:
        return {"captions": 0, "named_object": None, "other_object": None}
    return {"captions": len(named), "named_object": float(np.mean(named)),
            "other_object": float(np.mean(other))}


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="shapes_relation_report.py", description=__doc__.split("\n\n")[0],
               formatter_class=HelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a captioner run trained on shapes")
    p.add_argument("--beam-size", type=positive_int, default=3,
                   help="the beam size of the generated captions (1: greedy)")
    p.add_argument("--json", metavar="FILE",
                   help="also write the report to this JSON file (an existing one is replaced "
                        "only if it is an earlier report)")
    p.set_defaults(_run=report_main)
    return p


def check_trained_on_shapes(run_dir: str) -> None:
    """A one-line `UserError` when `run_dir` holds a captioner trained on another dataset
    (before its model is loaded; `load_run` reports a folder that holds no captioner run)."""
    from common.config import load_json

    config_path = Path(run_dir) / "config.json"
    if not config_path.is_file():
        return
    config = load_json(config_path, "a captioner run's config")
    if not isinstance(config, dict) or config.get("family") != "captioner":
        return
    data = config.get("data")
    dataset = data.get("dataset", "shapes") if isinstance(data, dict) else "shapes"
    if dataset != "shapes":
        raise UserError(f"RUN_DIR {run_dir}: a captioner trained on {dataset!r}; this report "
                        "reads the shapes test split, expected a run trained on 'shapes'")


def report_main(args: argparse.Namespace) -> int:
    from captioner.datasets.shapes import load_shapes
    from captioner.inference import load_run

    if args.json:
        check_output_file(args.json, "--json", result_keys=RESULT_KEYS)
    check_trained_on_shapes(args.run_dir)
    run = load_run(args.run_dir)
    test = load_shapes("test", image_size=run.image_size[0])
    forced = teacher_forced(run, test)  # one pass of the model for both teacher-forced views
    report = {"run_dir": args.run_dir, "beam_size": args.beam_size,
              "generated": generated_breakdown(run, test, args.beam_size),
              "teacher_forced_direction": teacher_forced_directions(run, test, forced),
              "teacher_forced_attention": teacher_forced_attention(run, test, forced)}
    print(f"{'objects':>7} {'images':>6} {'objects right':>13} {'relations':>9} "
          f"{'missing obj':>11} {'right axis':>10} {'right relation':>14}")
    for n, c in report["generated"].items():
        both = c.get("both_present", 0)
        print(f"{n:>7} {c['images']:>6} {c['objects_right']:>13} {c.get('relations', 0):>9} "
              f"{c.get('missing_object', 0):>11} {c.get('right_axis', 0):>6}/{both:<3} "
              f"{c.get('right_relation', 0):>10}/{both:<3}")
    for axis, r in report["teacher_forced_direction"].items():
        share = "n/a" if r["share"] is None else f"{100 * r['share']:.1f}%"
        print(f"teacher-forced direction, {axis}: {r['right']}/{r['total']} ({share})")
    attention = report["teacher_forced_attention"]
    if attention["captions"]:
        print(f"teacher-forced attention at the first object's shape word "
              f"({attention['captions']} captions): {100 * attention['named_object']:.1f}% on "
              f"that object, {100 * attention['other_object']:.1f}% on the other one")
    if args.json:
        with reported_write(args.json, "--json"):
            Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parses `argv` and prints the report; a `UserError` prints one line and gives 2."""
    return run_cli(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
