"""flaxen.errors against flax.errors: same class names, bases and constructor signatures."""

import inspect

import flax.errors as ref
import pytest

from flaxen import errors


def _error_classes(module):
    return {n: v for n, v in vars(module).items()
            if isinstance(v, type) and issubclass(v, BaseException)}


def test_every_flax_error_exists_in_flaxen():
    missing = set(_error_classes(ref)) - set(_error_classes(errors))
    assert not missing


@pytest.mark.parametrize("name", sorted(_error_classes(ref)))
def test_same_bases_and_signature(name):
    theirs, ours = getattr(ref, name), getattr(errors, name)
    their_bases = [b.__name__ for b in theirs.__mro__]
    our_bases = [b.__name__ for b in ours.__mro__]
    assert our_bases == their_bases
    def params(cls):
        sig = inspect.signature(cls.__init__)
        return [(p.name, p.kind, p.default) for p in sig.parameters.values()]

    assert params(ours) == params(theirs)
