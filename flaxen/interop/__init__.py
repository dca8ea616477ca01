"""Bring weights from other frameworks into flaxen.

- :mod:`flaxen.interop.torch`: ``convert`` a torch ``state_dict`` or ``nn.Module`` onto a
  flaxen tree, and ``verify`` that both models compute the same thing.
- :mod:`flaxen.interop.safetensors`: ``save_file`` / ``load_file`` of flaxen trees.

Both need the ``interop`` extra (``pip install 'flaxen[interop]'``); they are imported on
first use, so ``import flaxen.interop`` itself needs neither torch nor safetensors.

>>> import flaxen.interop
>>> sorted(flaxen.interop.__all__)
['safetensors', 'torch']
"""

import importlib

__all__ = ["safetensors", "torch"]


def __getattr__(name):
    if name in __all__:
        return importlib.import_module(f"flaxen.interop.{name}")
    raise AttributeError(f"module 'flaxen.interop' has no attribute {name!r}")
