"""``flaxen.experimental.nnx``: the same objects as :mod:`flaxen.nnx`, under the spec's path.

>>> from flaxen.experimental import nnx as exp_nnx
>>> from flaxen import nnx
>>> exp_nnx.Linear is nnx.Linear
True
"""

import sys as _sys

from flaxen import nnx as _nnx
from flaxen.nnx import *  # noqa: F403
from flaxen.nnx import __getattr__  # noqa: F401 - lazy names (TrainState, compatibility)

globals().update({k: v for k, v in vars(_nnx).items() if not k.startswith("__")})
_sys.modules[__name__ + ".nnx"] = _nnx  # flax.experimental.nnx.nnx.* paths in reprs
