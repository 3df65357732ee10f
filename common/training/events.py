"""TensorBoard event files cut back to a resumed run's position.

A run killed between two checkpoints has logged steps that its resumed run trains again; left
in place, TensorBoard draws those steps twice and the curves zigzag back. `truncate_events`
does for `RUN_DIR/logs/` what `RunDir.truncate_history` does for `history.jsonl`: it keeps
the events up to the restored global step and drops the later ones, so the resumed run's
events continue the curves.

Event files are TFRecord files of `Event` protos. Each file holding an event after the step is
rewritten in place, under its own name (TensorBoard reads a run's files in name order, so the
order of old and new files is kept): a complete copy is written beside it first, then moved
over it, so a kill during the rewrite leaves the old file or the new one, never half of one. A
file rewritten after a kill cut its last record short keeps its complete records, as
TensorBoard itself reads it. Files with nothing after the step are not touched (though each is
read: about 5 s for 150,000 scalar events). A rewritten file keeps its permissions.
"""

from __future__ import annotations

import os
from pathlib import Path

from common.config import replacing

#: What TensorBoard takes for an event file: "tfevents" in the file name.
EVENTS_MARK = "tfevents"
#: How a copy being written starts its name (no "tfevents" in it).
PARTIAL = ".truncating-"


def event_files(logs: str | os.PathLike) -> list[Path]:
    """The event files under `logs` (any depth), in name order; none when it is missing."""
    root = Path(logs)
    if not root.is_dir():
        return []
    return sorted(path for path in root.rglob(f"*{EVENTS_MARK}*") if path.is_file())


def read_events(path: str | os.PathLike) -> list:
    """The `Event` protos of one event file, in order; a partial last record is left out."""
    import tensorflow as tf

    events = []
    try:
        for record in tf.data.TFRecordDataset(str(path)):
            events.append(tf.compat.v1.Event.FromString(record.numpy()))
    except tf.errors.DataLossError:  # a record cut short by a kill: the complete ones count
        pass
    return events


def truncate_events(logs: str | os.PathLike, step: int) -> int:
    """Drop the events logged after global `step` from the event files under `logs`.

    Returns:
        How many events were dropped (0 when no file had any; nothing is rewritten then).

    Raises:
        OSError or a `tf.errors.OpError`: a file could not be rewritten (the old one is kept).
    """
    import tensorflow as tf

    for stale in Path(logs).rglob(f"{PARTIAL}*") if Path(logs).is_dir() else ():
        stale.unlink()  # a copy that a kill left half-written
    dropped = 0
    for path in event_files(logs):
        events = read_events(path)
        kept = [event for event in events if event.step <= step]
        if len(kept) == len(events):
            continue
        dropped += len(events) - len(kept)
        # No "tfevents" in the copy's name, so TensorBoard never reads it half-written; the
        # file keeps its permissions, so a TensorBoard of another user still reads it.
        with replacing(path, prefix=PARTIAL) as partial:
            with tf.io.TFRecordWriter(str(partial)) as writer:
                for event in kept:
                    writer.write(event.SerializeToString())
    return dropped

