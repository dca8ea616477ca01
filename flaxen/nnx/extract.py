"""``nnx.extract``: the prefix helpers Flax keeps in its ``extract`` module (``prefix`` and
the ``TreeState`` that graph-mode prefixes are). They live in
:mod:`flaxen.nnx.transforms._axes`.

>>> from flaxen import nnx
>>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
>>> isinstance(nnx.prefix(m, {...: 0}, graph=True), nnx.extract.TreeState)
True
"""

from flaxen.nnx.transforms._axes import NodePrefix, TreeState, prefix

__all__ = ["NodePrefix", "TreeState", "prefix"]
