"""`truncate_events`: TensorBoard event files cut back to a resumed run's step."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf

from common.training.events import event_files, read_events, truncate_events


def write_scalars(logs, steps, tag="loss"):
    writer = tf.summary.create_file_writer(str(logs))
    with writer.as_default():
        for step in steps:
            tf.summary.scalar(tag, float(step) / 10, step=step)
    writer.close()


def scalars(logs, tag="loss"):
    return [(event.step, round(float(tf.make_ndarray(value.tensor)), 6))
            for path in event_files(logs) for event in read_events(path)
            for value in event.summary.value if value.tag == tag]


def test_events_after_the_step_are_dropped_and_the_rest_kept(tmp_path):
    write_scalars(tmp_path, range(1, 8))
    (path,) = event_files(tmp_path)
    assert truncate_events(tmp_path, 4) == 3
    assert event_files(tmp_path) == [path]  # rewritten under its own name
    assert scalars(tmp_path) == [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4)]
    # The file-version event (step 0) that TensorBoard reads first is kept.
    assert read_events(path)[0].file_version.startswith("brain.Event")
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no copy left behind


def test_a_file_with_nothing_after_the_step_is_not_rewritten(tmp_path):
    write_scalars(tmp_path / "1", range(1, 4))
    write_scalars(tmp_path / "2", range(3, 6))
    old, new = event_files(tmp_path)
    before = os.stat(old)
    assert truncate_events(tmp_path, 3) == 2
    after = os.stat(old)
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (
        before.st_ino, before.st_mtime_ns, before.st_size)
    assert scalars(tmp_path) == [(1, 0.1), (2, 0.2), (3, 0.3), (3, 0.3)]
    assert truncate_events(tmp_path, 3) == 0


def test_a_record_cut_short_by_a_kill_keeps_the_complete_ones(tmp_path):
    write_scalars(tmp_path, range(1, 6))
    (path,) = event_files(tmp_path)
    path.write_bytes(path.read_bytes()[:-7])  # the last record's tail is lost
    assert [step for step, _ in scalars(tmp_path)] == [1, 2, 3, 4]
    assert truncate_events(tmp_path, 2) == 2
    assert scalars(tmp_path) == [(1, 0.1), (2, 0.2)]


def test_no_logs_folder_is_nothing_to_do(tmp_path):
    assert truncate_events(tmp_path / "logs", 0) == 0


def test_a_failed_rewrite_keeps_the_file_and_leaves_no_copy(tmp_path, monkeypatch):
    write_scalars(tmp_path, range(1, 4))
    (path,) = event_files(tmp_path)
    content = path.read_bytes()

    def no_space(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_space)
    with pytest.raises(OSError, match="No space"):
        truncate_events(tmp_path, 1)
    assert path.read_bytes() == content
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_a_rewritten_file_keeps_its_permissions_and_a_stale_copy_is_removed(tmp_path):
    write_scalars(tmp_path, range(1, 4))
    (path,) = event_files(tmp_path)
    path.chmod(0o644)
    stale = tmp_path / ".truncating-0123.tmp"  # what a kill during an earlier cut leaves
    stale.write_bytes(b"half")
    assert truncate_events(tmp_path, 1) == 2
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
