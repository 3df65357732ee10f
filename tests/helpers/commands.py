"""Several command lines of a family, run one after the other in one fresh Python process.

`run_commands("seq2seq", [argv, ...], env=...)` is `python -m seq2seq ARGV` for each `argv`,
in one child process: each command runs the package's `__main__` (`runpy`, as `-m` does), its
exit status taken from its `SystemExit`, its stdout and stderr captured at the file descriptors
(so a line that C++ or a library writes counts, as in a process of its own). The tests use it
where a command needs a process of its own environment (`KERAS_BACKEND=jax`, a device count)
but not a process of its own each: Python, Keras and JAX start once for all the commands.

A command may name folders to `watch`: the child records the SHA-256 of every file under each
of them just before and just after the command, so a test checks that a refused command wrote
nothing at the moment it ran, even when an earlier command of the batch changed the folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_CHILD = r"""
import hashlib, json, os, runpy, sys, traceback
from pathlib import Path

request = json.load(open(sys.argv[1], encoding="utf-8"))
sys.path.insert(0, os.getcwd())  # as `python -m` has it


def digests(folder):
    root = Path(folder)
    if not root.exists():
        return None
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


results = []
for number, command in enumerate(request["commands"]):
    before = {folder: digests(folder) for folder in command["watch"]}
    paths = [os.path.join(request["dir"], f"{number}.{name}") for name in ("out", "err")]
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    files = [open(path, "wb") for path in paths]
    os.dup2(files[0].fileno(), 1)
    os.dup2(files[1].fileno(), 2)
    sys.argv = [request["module"], *command["argv"]]
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as exc:  # what `python -m` would exit with
        code = exc.code
        if code is None or isinstance(code, int):
            status = code or 0
        else:
            print(code, file=sys.stderr)
            status = 1
    except BaseException:  # noqa: BLE001 (an uncaught exception: a traceback, status 1)
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(saved[0], 1)
    os.dup2(saved[1], 2)
    for fd in saved:
        os.close(fd)
    for file in files:
        file.close()
    out, err = (open(path, encoding="utf-8", errors="replace").read() for path in paths)
    after = {folder: digests(folder) for folder in command["watch"]}
    results.append({"status": status, "out": out, "err": err, "before": before,
                    "after": after})
json.dump(results, open(request["report"], "w", encoding="utf-8"))
"""


@dataclass
class CommandResult:
    """One command of `run_commands`: its exit status, what it wrote on stdout and stderr,
    and each watched folder's files (relative path -> SHA-256; None: no such folder) just
    before and just after it ran."""

    status: int
    out: str
    err: str
    before: dict[str, dict[str, str] | None] = field(default_factory=dict)
    after: dict[str, dict[str, str] | None] = field(default_factory=dict)

    def unchanged(self, folder: str | os.PathLike) -> bool:
        """Whether the command left every file of the watched `folder` as it found it."""
        return self.before[str(folder)] == self.after[str(folder)]


def run_commands(module: str, commands: Sequence[Sequence[str] | Mapping],
                 env: Mapping[str, str] | None = None, cwd: str | os.PathLike | None = None,
                 timeout: float = 1200.0) -> list[CommandResult]:
    """`python -m MODULE ARGV` for each of `commands`, in turn, in one child process.

    Args:
        module: the package run with `-m` (`seq2seq`, `captioner`).
        commands: each an argv (without the program), or `{"argv": [...], "watch": [folder,
            ...]}` for a command whose folders are fingerprinted before and after it.
        env: the child's environment (default: this process's).
        cwd: the child's working directory.
        timeout: seconds for the whole child.

    Returns:
        One `CommandResult` per command, in order.

    Raises:
        RuntimeError: the child itself failed (not a command: a command's failure is its
            status); the message holds the end of its stderr.
    """
    requests = [dict(command) if isinstance(command, Mapping) else {"argv": command}
                for command in commands]
    for request in requests:
        request["argv"] = [str(word) for word in request["argv"]]
        request["watch"] = [str(folder) for folder in request.get("watch", ())]
    with tempfile.TemporaryDirectory(prefix="commands-") as tmp:
        folder = Path(tmp)
        report = folder / "report.json"
        (folder / "request.json").write_text(json.dumps(
            {"module": module, "commands": requests, "dir": tmp, "report": str(report)}),
            encoding="utf-8")
        (folder / "child.py").write_text(_CHILD, encoding="utf-8")
        proc = subprocess.run([sys.executable, str(folder / "child.py"),
                               str(folder / "request.json")],
                              env=dict(env) if env is not None else None, cwd=cwd,
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not report.is_file():
            raise RuntimeError(f"the command process failed ({proc.returncode}): "
                               f"{proc.stderr[-3000:]}")
        results = json.loads(report.read_text(encoding="utf-8"))
    return [CommandResult(**result) for result in results]
