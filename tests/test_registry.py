import pytest

from common.errors import UserError
from common.registry import Registry, UnknownNameError


def test_unknown_name_lists_valid_choices():
    registry = Registry("encoder")
    registry.add("small-cnn", object())
    registry.add("vgg19", object())
    with pytest.raises(UnknownNameError) as info:
        registry.get("vgg91")
    message = str(info.value)
    assert "'vgg91'" in message
    assert "small-cnn, vgg19" in message
    assert isinstance(info.value, UserError)


def test_register_returns_object_and_keeps_order():
    registry = Registry("score")

    @registry.register("b")
    class B:
        pass

    registry.add("a", 1)
    assert registry.get("b") is B
    assert registry.names() == ["b", "a"]
    assert "a" in registry and "c" not in registry


def test_duplicate_registration_is_refused():
    registry = Registry("score")
    registry.add("dot", 1)
    with pytest.raises(ValueError, match="already registered"):
        registry.add("dot", 2)
