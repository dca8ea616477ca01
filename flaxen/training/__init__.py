"""flaxen.training: TrainState, checkpoints and other training utilities.

Submodules (as in ``flax.training``): ``train_state``, ``checkpoints``, ``orbax_utils``,
``early_stopping``, ``common_utils``, ``lr_schedule``, ``dynamic_scale``,
``prefetch_iterator``. They load on first access, so ``import flaxen.training`` stays cheap
and does not import optax or orbax until needed.

>>> from flaxen import training
>>> training.train_state.TrainState.__name__
'TrainState'
"""

import importlib as _importlib

_SUBMODULES = frozenset({
    "checkpoints",
    "common_utils",
    "dynamic_scale",
    "early_stopping",
    "lr_schedule",
    "orbax_utils",
    "prefetch_iterator",
    "train_state",
})


def __getattr__(name: str):
    if name in _SUBMODULES:
        module = _importlib.import_module(f"flaxen.training.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'flaxen.training' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _SUBMODULES)
