"""flaxen.metrics: training metrics writers.

``tensorboard`` holds :class:`~flaxen.metrics.tensorboard.SummaryWriter`; it needs the optional
``tensorboardX`` package (``pip install flaxen[tensorboard]``) only when a writer is created.
"""

import importlib as _importlib


def __getattr__(name):
    if name == "tensorboard":
        return _importlib.import_module("flaxen.metrics.tensorboard")
    raise AttributeError(f"module 'flaxen.metrics' has no attribute {name!r}")
