"""Today's ``nnx.scan`` (Flax 0.12.8): ``Carry`` markers in ``in_axes``/``out_axes``.

>>> from flaxen import nnx
>>> nnx.Carry
<class 'flaxen.nnx.transforms.scan.Carry'>
"""

from __future__ import annotations


class Carry:
    """Marks, in ``nnx.scan``'s ``in_axes``/``out_axes``, the argument that is the carry."""
