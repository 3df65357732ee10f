"""Java for the caption-metric tests: pycocoevalcap's PTB tokenizer and METEOR run on it.

`scripts/install_java.sh` installs it (Debian's default-jre-headless, as root) and
`scripts/test.sh` runs that first. Locally a missing `java` skips the tests that need it; in
CI (`CI=true`) it fails them, so that the fallback tokenizer cannot pass for the real one.
"""

import os

import pytest

from common.metrics.caption_metrics import java_available

MISSING = "java is not installed (bash scripts/install_java.sh installs it)"


def require_java() -> None:
    """Skips the calling test without `java` (fails it in CI, which installs it)."""
    if not java_available():
        if os.environ.get("CI") == "true":  # CI installs Java: never skip there
            pytest.fail(MISSING)
        pytest.skip(MISSING)


# Marks a test that needs Java (the `java` fixture of tests/common/metrics/conftest.py).
needs_java = pytest.mark.usefixtures("java")
