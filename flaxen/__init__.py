"""flaxen: a neural-network library for JAX, compatible with Flax.

``import flaxen as flax`` gives the same public names as Flax: ``flax.linen``,
``flax.struct``, ``flax.serialization``, ``flax.training`` and so on. Submodules are
imported on first attribute access, so ``import flaxen`` itself is cheap.

>>> import flaxen
>>> isinstance(flaxen.__version__, str)
True
"""

import importlib as _importlib

from flaxen.version import __version__

_SUBMODULES = frozenset({
    "config",
    "configurations",
    "core",
    "cursor",
    "errors",
    "experimental",
    "ids",
    "io",
    "jax_utils",
    "linen",
    "nnx",
    "serialization",
    "struct",
    "traceback_util",
    "training",
    "traverse_util",
    "typing",
})


def __getattr__(name: str):
    # Lazy submodule access keeps `import flaxen` fast and free of import cycles.
    if name in _SUBMODULES:
        if name == "config":
            module = _importlib.import_module("flaxen.configurations").config
        else:
            module = _importlib.import_module(f"flaxen.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'flaxen' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _SUBMODULES)
