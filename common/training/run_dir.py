"""The run directory: who owns it, its status file and its history.

Layout written by the trainer (the families add `config.json`, `vocab*.txt` (or SentencePiece `vocab*.model`) and the
captioner's `features/`; `RunDir` names every entry):

```
RUN_DIR/checkpoints/   tf.train.CheckpointManager checkpoints
RUN_DIR/best/          the best checkpoint by validation and best.json (`common.training.best`)
RUN_DIR/logs/          TensorBoard event files
RUN_DIR/history.jsonl  one JSON object per line: {"kind": "step" | "epoch", "epoch", "step", ...}
RUN_DIR/status.json    {"state": "training" | "finished" | "failed", "step", "epoch",
                        "epochs_done", ..., "pid", "host", "updated"}
```

Epochs are numbered from 1 in these files, as the training log prints them (`Epoch 4/8`): a
record's `epoch` and `best_epoch`, `status.json`'s `epoch` (that of its newest step; 0 before
the first) beside `epochs_done`. A `history.jsonl` written before that numbering counted from 0
(its first record is of epoch 0, which the numbering from 1 never writes): `read_history` reads
it renumbered, and `truncate_history`, which every resume calls, rewrites it so, so that a
resumed older run's file is numbered one way.

A directory "holds a run" when it has any of the trainer's entries (a non-empty
`checkpoints/`, `best/` or `logs/`, `history.jsonl`, `status.json`). Starting a new run there without
`resume` is refused, so nobody's run is overwritten; the families' own files (`config.json`,
vocabularies) written just before training do not count. A folder that holds anything else and
nothing a run writes (`RunDir.foreign_names`: a repository's `docs/`) is not a run directory:
a run's first claim refuses it, resumed or not, before anything is written there.

`status.json` names the process that wrote it (`pid`, `host`). A run killed by SIGKILL (or a
machine that went down) cannot say so, and its file stays "training"; `read_status` reports such
a status, whose process no longer runs on this host, as "killed", and `--resume` says so. A
SIGTERM is raised as a `KeyboardInterrupt` while a run trains (`common.runner.Runner.train`), so
the trainers write "failed" then, as they do for Ctrl-C.

`vocab.sha256` ties the vocabularies to the weights: a new run records each vocabulary file's
SHA-256 there (`record_vocabularies`, the format of `sha256sum`), and whatever reads a run's
vocabularies (resume, evaluate, export, decode, a warm start) checks them first
(`check_vocabularies`): a vocabulary reordered or swapped since training has the same size, so
no weight shape would tell, and every token would come out as another. A run made before
digests were recorded has no such file and is read as it is.

A directory that cannot be written (read-only, a file in the way, no space left) is a
`RunDirError`: `claim` tries a small write before anything else, and every later write of the
trainers (a checkpoint, `best/`, `history.jsonl`, `status.json`, the TensorBoard events, the
final weights) that fails becomes one, keeping what was complete: the last complete checkpoint,
and a `history.jsonl` and `status.json` that are the old file or the new one, never half of one
(an append that fails is cut back off).

An epoch's line in `history.jsonl` is written before the epoch's checkpoint, so a run stopped
at any moment loses no epoch's record: stopped between the two, it resumes from the checkpoint
before, `truncate_history` drops the line (its step is past that checkpoint's), and the epoch
is trained and recorded again, once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from common.config import atomic_write_text, save_json
from common.errors import UserError

STATES = ("training", "finished", "failed")
KILLED = "killed"  # what `read_status` makes of a "training" status whose process is gone


class RunDirError(UserError):
    """The run directory cannot be written: read-only, a file in the way, or no space left."""


def write_failure(path: str | os.PathLike, exc: BaseException,
                  what: str = "run directory") -> RunDirError:
    """A `RunDirError` for a failed write of `path` (in a `what`), with the system's reason in
    one line."""
    if isinstance(exc, OSError) and exc.errno:  # h5py's strerror is a paragraph
        reason = os.strerror(exc.errno)
    else:
        reason = getattr(exc, "strerror", None) or getattr(exc, "message", None) or str(exc)
    reason = str(reason).strip()
    if reason.startswith("{{function_node"):
        # TensorFlow's "{{function_node ...}} TEMP_PATH; No space left on device [Op:SaveV2]",
        # perhaps followed by lines of context ("\tFailed to flush 3 events to PATH"): the
        # reason is after the first line's last ";".
        reason = reason.splitlines()[0].split("}}", 1)[-1].rsplit(";", 1)[-1]
        reason = re.sub(r"\s*\[Op:\w+\]( name: \S*)?$", "", reason)
    reason = " ".join(reason.split())
    reason = reason[:200] or type(exc).__name__
    return RunDirError(f"cannot write {path}: {reason}; expected a writable {what} "
                       "with free space")


def write_errors() -> tuple[type[BaseException], ...]:
    """What a failed write raises: `OSError`, and, once TensorFlow is loaded, its errors of a
    file that cannot be written (no space, read-only, a file in the way)."""
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return (OSError,)
    errors = tf.errors
    return (OSError, errors.ResourceExhaustedError, errors.PermissionDeniedError,
            errors.FailedPreconditionError, errors.NotFoundError, errors.AlreadyExistsError)


@contextlib.contextmanager
def failed_writes_named(path: str | os.PathLike, what: str = "run directory",
                        errors: tuple[type[BaseException], ...] | None = None) -> Iterator[None]:
    """Turn a failed write inside the block (one of `errors`, default `write_errors()`) into
    the one-line `RunDirError` of `write_failure(path, ...)`."""
    try:
        yield
    except Exception as exc:
        if not isinstance(exc, errors or write_errors()):
            raise
        raise write_failure(path, exc, what) from None


def _process_gone(pid: Any, host: Any) -> bool:
    """Whether process `pid` of `host` is known to have ended: `host` is this machine and no
    process `pid` runs here (another user's process counts as running; a reused pid hides an
    end, which then reads as running)."""
    if (os.name != "posix" or not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0
            or host != socket.gethostname() or pid == os.getpid()):
        return False
    try:
        os.kill(pid, 0)  # signal 0: only whether it exists
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: it runs, as another user
        return False
    return False


def _epochs_from_one(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`records` of `history.jsonl` with their epochs numbered from 1: those of a file written
    when they were numbered from 0 (an `epoch` 0 among them: a run's first record is of its
    first epoch) get one more `epoch` and `best_epoch`; others are returned as they are."""
    if not any(_is_count(r.get("epoch")) and r["epoch"] == 0 for r in records):
        return records
    renumbered = []
    for record in records:
        record = dict(record)
        for key in ("epoch", "best_epoch"):
            if _is_count(record.get(key)):
                record[key] += 1
        renumbered.append(record)
    return renumbered


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class _Entry:
    """A file or folder of the run directory: `run.config` is its path, `RunDir.config` its
    name, so each name is written once, here."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, run: RunDir | None, owner: type) -> Any:
        return self.name if run is None else run.path / self.name


class RunDir:
    """Paths and small files of one run directory; it owns every file name in it.

    Args:
        path: the run directory; created when missing.

    Example:
    >>> run = RunDir("/tmp/example-run")            # doctest: +SKIP
    >>> run.write_status("training", epoch=0, step=0)  # doctest: +SKIP
    >>> RunDir.config, RunDir("runs/demo").config
    ('config.json', PosixPath('runs/demo/config.json'))
    """

    # The trainer's entries (a directory holding any of them holds a run).
    checkpoints = _Entry("checkpoints")
    logs = _Entry("logs")
    history = _Entry("history.jsonl")
    status = _Entry("status.json")
    best = _Entry("best")  # the best checkpoint by validation (`common.training.best`)
    # The families' files, written before training.
    config = _Entry("config.json")
    vocab = _Entry("vocab.txt")  # the captioner's words
    source_vocab = _Entry("vocab.source.txt")  # the translators' two vocabularies
    target_vocab = _Entry("vocab.target.txt")
    # Or their SentencePiece models (`--vocab sentencepiece`): one a side, or one shared.
    source_subwords = _Entry("vocab.source.model")
    target_subwords = _Entry("vocab.target.model")
    shared_subwords = _Entry("vocab.model")
    vocab_digests = _Entry("vocab.sha256")  # the vocabularies' SHA-256, as trained
    features = _Entry("features")  # the captioner's cached encoder features
    jax_weights = _Entry("model.weights.h5")  # a run of the JAX trainer (`jax_trainer`)
    jax_checkpoints = _Entry("jax")  # and its checkpoints, `jax/ckpt-STEP/`
    # The data a JAX run made itself (`train` on KERAS_BACKEND=jax without --prepared).
    prepared = _Entry("prepared")

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def run_entries(self) -> list[str]:
        """The trainer's entries present in the directory (empty: it holds no run)."""
        found = []
        for entry in (self.checkpoints, self.logs, self.best):
            if entry.is_dir() and any(entry.iterdir()):
                found.append(entry.name + "/")
        for entry in (self.history, self.status):
            if entry.exists():
                found.append(entry.name)
        return found

    @classmethod
    def written_by_a_run(cls, name: str) -> bool:
        """Whether `name` is an entry of a run directory (trainer's or family's), or a
        vocabulary (`vocab*.txt`, `vocab*.model`)."""
        if name.startswith("vocab") and Path(name).suffix in (".txt", ".model"):
            return True
        return any(isinstance(v, _Entry) and v.name == name for v in vars(cls).values())

    def foreign_names(self) -> list[str]:
        """What the directory holds that no run writes, hidden names aside (`.gitkeep`, the
        temporary files of an atomic write). Empty when it holds any entry of a run: a run's
        folder may hold a user's files too (`evaluate --json RUN/test.json`)."""
        if not self.path.is_dir():
            return []
        names = sorted(p.name for p in self.path.iterdir() if not p.name.startswith("."))
        return [] if any(map(self.written_by_a_run, names)) else names

    def own_files(self) -> list[Path]:
        """The files a run writes beside its entries: its config, vocabularies and final
        weights."""
        return [self.config, self.jax_weights, self.vocab_digests,
                *sorted(p for p in self.path.glob("vocab*") if p.suffix in (".txt", ".model"))]

    def record_vocabularies(self, names: Iterable[str]) -> None:
        """Write `vocab.sha256`: the SHA-256 of each vocabulary file `names` (of this
        directory), which `check_vocabularies` holds them to from now on."""
        lines = [f"{_sha256(self.path / name)}  {name}\n" for name in sorted(names)]
        with failed_writes_named(self.vocab_digests):
            atomic_write_text(self.vocab_digests, "".join(lines))

    def check_vocabularies(self) -> None:
        """Refuse, in one line, vocabularies changed since `record_vocabularies` (reordered,
        swapped for another run's, edited): the weights hold the trained token order.

        Raises:
            UserError: a listed file is missing or differs, or `vocab.sha256` is unreadable.
        """
        digests = self.vocab_digests
        if not digests.is_file():  # a run made before digests were recorded
            return
        try:
            lines = digests.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{digests}: cannot be read ({exc}); expected the run's "
                            "vocabulary digests") from None
        for number, line in enumerate(lines, 1):
            digest, _, name = line.partition("  ")
            if not re.fullmatch(r"[0-9a-f]{64}", digest) or not name or "/" in name:
                raise UserError(f"{digests}: line {number} is not `SHA256  FILE`; expected "
                                "the digests the run was trained with")
            path = self.path / name
            if not path.is_file():
                raise UserError(f"{path}: missing; expected the run's vocabulary (listed in "
                                f"{digests.name})")
            if _sha256(path) != digest:
                raise UserError(
                    f"{path}: changed since the run was trained (its SHA-256 is not the one "
                    f"in {digests.name}); the weights follow the trained vocabulary's token "
                    "order: put the run's own file back")

    def claim(self, resume: bool, first: bool = False, backend: str = "tensorflow") -> None:
        """Make sure this run may write here, creating the directory.

        Args:
            resume: the run goes on from what the directory holds.
            first: this is the run's first claim, before it writes its config and
                vocabularies: a fresh run refuses a directory where those files already are.
            backend: the trainer's: the TensorFlow trainer does not resume a run of the JAX
                trainer (its `jax/` checkpoints), which it would train over from scratch.

        Raises:
            UserError: the path is a file or an export, or on a `first` claim a folder of other
                things that is not a run directory (`foreign_names`), or it holds another run
                (or files a fresh `first` claim would write over) and `resume` is false, or
                `resume` is true and it holds an averaged run (`Runner.average`: no optimizer
                to resume).
            RunDirError: the directory cannot be created or written.
        """
        if self.path.exists() and not self.path.is_dir():
            raise UserError(f"run directory {self.path} is a file; expected a directory")
        if (self.path / "saved_model.pb").exists():  # an export: `export --overwrite` empties it
            raise UserError(f"run directory {self.path} holds a SavedModel export; expected "
                            "another directory for the run")
        foreign = self.foreign_names() if first else []
        if foreign:  # `--out docs`: the run's files would land among the user's
            shown = ", ".join(name + "/" * (self.path / name).is_dir() for name in foreign[:3])
            shown += ", ..." if len(foreign) > 3 else ""
            raise UserError(
                f"{self.path} is not a run directory: it holds {shown} and nothing of a run "
                f"({RunDir.config}, {RunDir.status}, {RunDir.checkpoints}/, ...); expected a "
                "run directory, a new folder or an empty one")
        jax_checkpoints = self.jax_checkpoints
        if (resume and backend != "jax" and jax_checkpoints.is_dir()
                and any(jax_checkpoints.iterdir())):
            raise UserError(
                f"run directory {self.path} is a run of the JAX trainer ({jax_checkpoints}/"
                "ckpt-N); TensorFlow --resume would train over it from scratch: resume it on JAX "
                "(KERAS_BACKEND=jax ... train --prepared DIR --resume) or export it")
        entries = self.run_entries()
        # `Runner.average` wrote "averaged" (read only where a run may be there).
        averaged = ((resume or entries) and bool((self.read_status() or {}).get("averaged")))
        if resume and averaged:
            raise UserError(f"{self.path}: an averaged run holds no optimizer to resume: use "
                            f"--init-from {self.path} with a new --out")
        status = self.read_status() if resume and first else None
        if status and status.get("state") == KILLED:
            print(f"{self.path}: the run was killed at step {status.get('step')} (process "
                  f"{status.get('pid')} on {status.get('host')} is gone; its last status was "
                  f"written {status.get('updated')}); resuming it", file=sys.stderr, flush=True)
        if entries and not resume:
            what = (f"start from it with --init-from {self.path} and another --out"
                    if averaged else "resume it (--resume)")
            raise UserError(
                f"run directory {self.path} already holds a{'n averaged' if averaged else ''} "
                f"run ({', '.join(entries)}); {what} or choose another directory"
            )
        if first and not entries and not resume:  # files the run would write over, of no run
            own = sorted(p.name for p in self.own_files() if p.is_file())
            if own:
                raise UserError(
                    f"run directory {self.path} holds {', '.join(own)} of no run, which the run "
                    "would overwrite; expected a new or empty directory (or --resume a run "
                    "stopped before its first record)")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            for directory in (self.path, self.checkpoints):
                if directory.is_dir() or directory == self.path:
                    with tempfile.TemporaryFile(dir=directory, prefix=".write-check-"):
                        pass
        except OSError as exc:
            raise write_failure(self.path, exc) from None
        for directory, what in ((self.checkpoints, "checkpoint"), (self.logs, "TensorBoard"),
                                (self.best, "best checkpoint")):
            if directory.exists() and not directory.is_dir():
                raise RunDirError(f"{directory} is a file; expected the run's {what} directory")

    def read_status(self) -> dict[str, Any] | None:
        """The contents of `status.json`, or None when there is none.

        A "training" status whose process (`pid`) no longer runs on this host (`host`) reads
        as state "killed" (`KILLED`): a SIGKILL, or a machine that went down, left it behind.
        A status written on another host, or before the file named its process, is read as
        it is.
        """
        try:
            with open(self.status, encoding="utf-8") as f:
                status = json.load(f)
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        if (isinstance(status, dict) and status.get("state") == "training"
                and _process_gone(status.get("pid"), status.get("host"))):
            status = {**status, "state": KILLED}
        return status

    def write_status(self, state: str, **fields: Any) -> None:
        """Atomically write `status.json` as `{"state": state, **fields, "pid": ...,
        "host": ..., "updated": ...}`: the process writing it and the time.

        Raises:
            RunDirError: it cannot be written (the old file is kept).
        """
        if state not in STATES:
            raise ValueError(f"unknown run state {state!r}; expected one of {STATES}")
        data = {"state": state, **fields, "pid": os.getpid(), "host": socket.gethostname(),
                "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        try:
            save_json(self.status, data)
        except OSError as exc:
            raise write_failure(self.status, exc) from None

    def append_history(self, record: dict[str, Any]) -> None:
        """Append one JSON line to `history.jsonl`.

        Raises:
            RunDirError: it cannot be written; the part of the line written is cut back off,
                so the file is left as it was (a half line would swallow the next one).
        """
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            with open(self.history, "ab", buffering=0) as f:
                end = f.seek(0, os.SEEK_END)
                try:
                    written = 0
                    while written < len(line):  # an unbuffered write may take part of it
                        written += f.write(line[written:])
                except OSError:
                    with contextlib.suppress(OSError):  # not a regular file (/dev/full)
                        f.truncate(end)
                    raise
        except OSError as exc:
            raise write_failure(self.history, exc) from None

    def read_history(self) -> list[dict[str, Any]]:
        """All records of `history.jsonl` (an unreadable last line, from a crash, is skipped),
        epochs numbered from 1 (a file that counted them from 0 is read renumbered)."""
        if not self.history.exists():
            return []
        records = []
        with open(self.history, encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(record, dict):  # anything else is not one of its records
                    records.append(record)
        return _epochs_from_one(records)

    def truncate_history(self, step: int) -> None:
        """Keep only the records up to global `step`: the steps after it will be run again.

        The file is rewritten (atomically) only when that changes it: when it has records
        past `step`, lines that are not records (the half line of a kill), or epochs
        numbered from 0 (a run written before they were numbered from 1: `read_history`).

        Raises:
            RunDirError: it cannot be rewritten (the old file is kept).
        """
        if not self.history.exists():
            return
        kept = [r for r in self.read_history() if int(r.get("step", 0)) <= step]
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept)
        if self.history.read_text(encoding="utf-8", errors="replace") == text:
            return
        try:
            atomic_write_text(self.history, text)
        except OSError as exc:
            raise write_failure(self.history, exc) from None


#: The files of a JAX checkpoint, `jax/ckpt-STEP/`: the weights (`RunDir.jax_weights`'s name),
#: every variable's value with the optimizer's and the position (`state.npz`), and the position
#: (`position.json`): `common.training.jax_trainer` writes them.
STATE_FILE = "state.npz"
POSITION_FILE = "position.json"


def complete_jax_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """The complete `ckpt-STEP` folders of `directory` (all three files), newest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [p for p in directory.glob("ckpt-*")
             if p.name[5:].isascii() and p.name[5:].isdigit()  # ("²" is a digit to str)
             and all((p / f).is_file() for f in (RunDir.jax_weights, STATE_FILE, POSITION_FILE))]
    return sorted(found, key=lambda p: int(p.name[5:]), reverse=True)
