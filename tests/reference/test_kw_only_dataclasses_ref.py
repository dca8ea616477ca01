"""Differential test: flaxen.linen.kw_only_dataclasses builds the same classes as flax's."""

import dataclasses
import inspect

import flax.linen.kw_only_dataclasses as F

import flaxen.linen.kw_only_dataclasses as X


def _describe(kwd):
    @kwd.dataclass
    class Base:
        a: int
        k: int = kwd.field(default=2, kw_only=True)
        c: int

    @kwd.dataclass
    class Child(Base):
        size: float
        k: int = 4

    @kwd.dataclass(frozen=True, extra_fields=[("tag", str, kwd.field(default="t",
                                                                       kw_only=True))])
    class Marked:
        x: float
        _: kwd.KW_ONLY
        y: int = 5

    out = []
    cases = [(Base, (1, 2)), (Base, (1, 2, 3)), (Base, (1,)), (Child, (1, 2, 3.0)),
             (Child, (1, 2, 3.0, 4)), (Child, (1, 2, 3.0, 4, 5)), (Marked, (1.0,)),
             (Marked, (1.0, 2))]
    for cls, args in cases:
        try:
            made = repr(cls(*args)).split(".")[-1]
        except TypeError as e:
            made = str(e)
        out.append((
            str(inspect.signature(cls)),
            cls.__match_args__,
            [(f.name, dict(f.metadata) != {}) for f in dataclasses.fields(cls)],
            list(cls.__dict__["__annotations__"]),
            made,
        ))
    return out


def test_classes_match_flax():
    assert _describe(X) == _describe(F)
