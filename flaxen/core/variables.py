"""Variable dicts (``flax.core.variables``).

A variable dict maps collection names (``'params'``, ``'batch_stats'``, ...) to nested dicts
whose leaves are arrays; every collection shares the module tree's structure, so a layer's
name can appear under several collections. :class:`Variable` is a reference to one leaf.

>>> from flaxen.core import variables
>>> variables.Variable.__name__
'Variable'
"""

from flaxen.core.scope import Variable

__all__ = ["Variable"]
