"""Reading a TensorFlow profiler trace: op time by op and by group, for the profiles of
`profile_translator.py` (a training step) and `engines.py` (a SavedModel's decoding).

`op_times` sums the executor's op events of the trace (each TensorFlow op that ran, on any
thread) by `(op name, op type)`; `classify` puts an op in one of `GROUPS` (matrix products,
softmax, dropout's random numbers, layer norm, embedding lookups and their gradient, optimizer
update, ...).
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

from common.errors import UserError

# (group, regular expression on the op's name, on its type), the first match wins. The name
# carries the Keras scope ("decoder_0/ffn_norm/...", "adam/...").
GROUPS: list[tuple[str, str, str]] = [
    ("optimizer update (Adam, clipping)", r"(?i)adam|optimizer|apply_grad|clip", r""),
    ("matrix products", r"", r"MatMul|Einsum|Conv"),
    ("layer norm", r"(?i)norm", r""),
    ("softmax and cross-entropy", r"", r"Softmax|CrossEntropy|Logsumexp"),
    ("dropout (random numbers)", r"", r"Random|RngBitGenerator|RngReadAndSkip"),
    ("embedding lookup and gradient", r"", r"Gather|Scatter|UnsortedSegment|Unique"),
    ("transposes", r"", r"Transpose"),
    ("casts (mixed precision)", r"", r"^_?Cast$"),
    ("element-wise and other", r"", r""),
]


def classify(op_name: str, op_type: str) -> str:
    """The group of `GROUPS` an op falls in (every pattern given must match)."""
    for group, name_pattern, type_pattern in GROUPS:
        if re.search(name_pattern, op_name) and re.search(type_pattern, op_type):
            return group
    return GROUPS[-1][0]


def op_times(logdir: str) -> collections.Counter:
    """Summed durations (seconds) by `(op name, op type)` of the executor's op events in a
    profiler trace (the `.xplane.pb` files under `logdir`)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    totals: collections.Counter = collections.Counter()
    files = list(Path(logdir).rglob("*.xplane.pb"))
    if not files:
        raise UserError(f"the profiler wrote no trace under {logdir}")
    for path in files:
        space = xplane_pb2.XSpace()
        space.ParseFromString(path.read_bytes())
        for plane in space.planes:
            if not plane.name.startswith("/host:CPU"):
                continue
            for line in plane.lines:
                for event in line.events:
                    name = plane.event_metadata[event.metadata_id].name
                    # Executor ops are traced as "op_name:OpType".
                    # (framework events such as "ExecutorState::Process" are skipped).
                    if ":" not in name or "::" in name:
                        continue
                    op_name, op_type = name.rsplit(":", 1)
                    if not re.fullmatch(r"_?[A-Z][A-Za-z0-9_]*", op_type):
                        continue
                    totals[op_name, op_type] += event.duration_ps * 1e-12
    return totals
