"""Progress over a known number of items (sentences decoded, ...) on stderr: tqdm's live bar on a
terminal, plain lines anywhere else.

A live bar redraws itself with carriage returns; written to a file or a pipe (`evaluate ...
2> eval.log`) the redraws pile up into one line of a thousand characters. There, as `train`
writes one line per epoch, `LineProgress` writes a line each time another tenth of the work is
done (or a minute has passed since the last line), and one at the end:

    decoding: 300/1000 sentences (30%), 12s
    decoding: 1000/1000 sentences in 41s (24.4 sentences/s)

Example:
>>> import io
>>> stream = io.StringIO()
>>> bar = progress_bar(4, "decoding", "sentences", stream=stream)
>>> for _ in range(4):
...     bar.update(1)
>>> bar.close()
>>> [line.split(",")[0] for line in stream.getvalue().splitlines()][:3]
['decoding: 1/4 sentences (25%)', 'decoding: 2/4 sentences (50%)', 'decoding: 3/4 sentences (75%)']
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

#: The longest a `LineProgress` stays silent while work goes on, in seconds.
EVERY_S = 60.0


class LineProgress:
    """tqdm's `update`/`close` as plain lines on `stream`: one each time another tenth of
    `total` is done or `every_s` seconds have passed, and one at the end (`close`, once all
    `total` are done).

    Args:
        total: the number of items.
        desc: what is done ("decoding").
        unit: what is counted, plural ("sentences").
        stream: where the lines go (default: stderr).
        every_s: the longest silence between two lines while items are done.
    """

    def __init__(self, total: int, desc: str, unit: str, stream: TextIO | None = None,
                 every_s: float = EVERY_S):
        self.total, self.desc, self.unit = total, desc, unit
        self.stream = sys.stderr if stream is None else stream
        self.every_s = every_s
        self.done = 0
        self.start = self._said = time.perf_counter()
        self._tenths = 0

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter()
        tenths = 10 * self.done // self.total if self.total else 10
        if self.done < self.total and (tenths > self._tenths or now - self._said >= self.every_s):
            percent = 100 * self.done // self.total
            self._say(f"{self.desc}: {self.done}/{self.total} {self.unit} ({percent}%), "
                      f"{now - self.start:.0f}s")
            self._said = now
        self._tenths = max(self._tenths, tenths)

    def close(self) -> None:
        """The final line, once every item is done (none for work stopped before)."""
        if self.total and self.done >= self.total:
            seconds = time.perf_counter() - self.start
            self._say(f"{self.desc}: {self.done}/{self.total} {self.unit} in {seconds:.0f}s "
                      f"({self.done / max(seconds, 1e-9):.1f} {self.unit}/s)")
        self.total = 0  # closed: a second close says nothing

    def _say(self, line: str) -> None:
        print(line, file=self.stream, flush=True)


def progress_bar(total: int, desc: str, unit: str, stream: TextIO | None = None) -> Any:
    """tqdm's bar over `total` items on a terminal `stream` (default: stderr), else a
    `LineProgress`; both are advanced with `update(n)` and ended with `close()`."""
    stream = sys.stderr if stream is None else stream
    if is_terminal(stream):
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit=unit, file=stream)
    return LineProgress(total, desc, unit, stream)


def is_terminal(stream: Any) -> bool:
    """Whether `stream` is a terminal (False for a file, a pipe, a closed stream or none)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False
