"""A toy export (`tests.helpers.toy_export.ToyModule`, beam sizes 1-5, default 3) shared by the
tests of what every export holds: its graph and its warm-up file."""

import pytest

from tests.helpers.toy_export import ToyModule

SIZES = (1, 2, 3, 4, 5)
DEFAULT_BEAM_SIZE = 3


@pytest.fixture(scope="session")
def toy_module() -> ToyModule:
    return ToyModule(beam_sizes=SIZES, default_beam_size=DEFAULT_BEAM_SIZE)


@pytest.fixture(scope="session")
def toy_export(toy_module, tmp_path_factory):
    """`toy_module` saved: both signatures and the warm-up file."""
    return toy_module.save(tmp_path_factory.mktemp("toy-export") / "export")
