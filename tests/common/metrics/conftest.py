"""The `java` fixture: skips a test without Java, or fails it in CI (`tests/common/metrics/java.py`)."""

import pytest

from tests.common.metrics.java import require_java


@pytest.fixture
def java() -> None:
    require_java()
