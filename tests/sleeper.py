"""A process for `tests/test_process_guard.py`: prints its SIGINT handler and the signals it
ignores as one JSON line, then sleeps (`python -m tests.sleeper`)."""

import json
import os
import signal
import sys
import time

from tests.process_guard import signals_ignored

handler = signal.getsignal(signal.SIGINT)
print(json.dumps({
    "sigint_handler": getattr(handler, "__name__", str(handler)),
    "ignored": sorted(s for s in signals_ignored(os.getpid()) if s in (signal.SIGINT,
                                                                       signal.SIGTERM)),
}), flush=True)
sys.stdout.flush()
time.sleep(600)
