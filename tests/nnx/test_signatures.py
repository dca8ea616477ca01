"""Module classes show their own ``__init__`` parameters to ``inspect`` (help(), IDEs)."""

import inspect

from flaxen import nnx


def test_layer_signature_lists_init_parameters():
    params = inspect.signature(nnx.LinearGeneral).parameters
    assert list(params)[:2] == ["in_features", "out_features"]
    assert "self" not in params and params["rngs"].kind is inspect.Parameter.KEYWORD_ONLY


def test_user_module_signature_and_construction():
    class Block(nnx.Module):
        def __init__(self, width: int, *, depth: int = 2):
            self.width, self.depth = width, depth

    assert str(inspect.signature(Block)) == "(width: int, *, depth: int = 2)"
    assert Block(3).depth == 2
