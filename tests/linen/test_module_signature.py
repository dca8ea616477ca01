"""The constructor Linen generates for a Module, as introspection tools see it (fiddle reads
``inspect.signature``, pattern matching reads ``__match_args__``)."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import flaxen.linen as nn


class Plain(nn.Module):
    features: int
    use_bias: bool = True


class KeywordOnly(nn.Module, kw_only=True):
    size: int = 1


def test_init_annotations_list_every_field_and_return_none():
    ann = Plain.__init__.__annotations__
    assert list(ann) == ["features", "use_bias", "parent", "name", "return"]
    assert ann["features"] == "int" and ann["return"] is None
    assert ann["name"] == typing.Optional[str]  # noqa: UP045 - the type Flax gives name
    assert inspect.signature(Plain).return_annotation is None


def test_string_annotations_resolve_in_the_defining_module():
    hints = typing.get_type_hints(Plain.__init__)
    assert hints["features"] is int and hints["use_bias"] is bool


def test_reserved_fields_carry_types_not_strings():
    types = {f.name: f.type for f in dataclasses.fields(Plain)}
    assert not isinstance(types["parent"], str) and not isinstance(types["name"], str)
    assert Plain.__annotations__["parent"] == types["parent"]


def test_match_args_include_parent_and_name_unless_keyword_only():
    assert Plain.__match_args__ == ("features", "use_bias", "parent", "name")
    assert KeywordOnly.__match_args__ == ()
    match Plain(3, name="p"):
        case Plain(features, _, _, name):
            assert (features, name) == (3, "p")


def test_flaxens_own_layers_have_evaluated_annotations():
    assert nn.Dense.__init__.__annotations__["features"] is int
    assert dataclasses.fields(nn.Dense)[0].type is int
