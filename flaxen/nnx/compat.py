"""``nnx.compat``: the graph-mode forms of the NNX API (``graph=True``, ``graph_updates=True``).

Each name here is the ``flaxen.nnx`` function of the same name with those switches turned on
by default (they can still be overridden per call), for code written before tree mode:

>>> from flaxen import nnx
>>> v = nnx.Param(1)
>>> graphdef, state = nnx.compat.split([v, v])   # shared Variable kept once
>>> len(nnx.to_flat_state(state))
1
"""

from __future__ import annotations

import functools
import importlib
import typing as tp

from flaxen.nnx import graphlib as _graphlib

_GRAPH_ONLY: dict[str, tp.Any] = {"graph": True}
_BOTH: dict[str, tp.Any] = {"graph": True, "graph_updates": True}

split = functools.partial(_graphlib.split, **_GRAPH_ONLY)
state = functools.partial(_graphlib.state, **_GRAPH_ONLY)
clone = functools.partial(_graphlib.clone, **_GRAPH_ONLY)
graphdef = functools.partial(_graphlib.graphdef, **_GRAPH_ONLY)
flatten = functools.partial(_graphlib.flatten, **_GRAPH_ONLY)
iter_graph = functools.partial(_graphlib.iter_graph, **_GRAPH_ONLY)
recursive_map = functools.partial(_graphlib.recursive_map, **_GRAPH_ONLY)
iter_modules = functools.partial(_graphlib.iter_modules, **_GRAPH_ONLY)
iter_children = functools.partial(_graphlib.iter_children, **_GRAPH_ONLY)

# resolved on first use: (module, name, defaults)
_LAZY: dict[str, tuple[str, str, dict]] = {
    "view": ("flaxen.nnx.graphlib", "view", _GRAPH_ONLY),
    "view_info": ("flaxen.nnx.graphlib", "view_info", _GRAPH_ONLY),
    "cached_partial": ("flaxen.nnx", "cached_partial", _BOTH),
    "split_rngs": ("flaxen.nnx", "split_rngs", _BOTH),
    "fork_rngs": ("flaxen.nnx", "fork_rngs", _BOTH),
    "reseed": ("flaxen.nnx", "reseed", _GRAPH_ONLY),
    "backup_keys": ("flaxen.nnx", "backup_keys", _GRAPH_ONLY),
    "get_abstract_model": ("flaxen.nnx", "get_abstract_model", _GRAPH_ONLY),
    **{name: ("flaxen.nnx", name, _BOTH) for name in (
        "jit", "shard_map", "grad", "value_and_grad", "custom_vjp", "vjp", "jvp", "remat",
        "vmap", "scan", "pmap", "while_loop", "fori_loop", "eval_shape", "cond", "switch",
        "checkify")},
}


def __getattr__(name: str) -> tp.Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'flaxen.nnx.compat' has no attribute {name!r}")
    module_name, attr, defaults = target
    fn = getattr(importlib.import_module(module_name), attr, None)
    if fn is None:
        raise AttributeError(
            f"nnx.compat.{name}: flaxen.nnx has no {attr!r} yet, so its graph-mode form is "
            "not available")
    value = functools.partial(fn, **defaults)
    globals()[name] = value
    return value
