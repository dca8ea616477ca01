"""flatten_dict / unflatten_dict on a 10,000-leaf parameter tree: flaxen vs flax vs plain Python.

Each of flatten_dict and unflatten_dict alone, with tuple keys and with sep='/', then round trips.

The "jax" baseline here is the shortest hand-written recursive version (no options, no
FrozenDict or empty-node handling): the speed limit for pure Python.
"""

from __future__ import annotations

from benchmarks._harness import Result, compare, have_flax


def _dropped(impls: dict) -> dict:
    # The harness blocks on each timed call's result with jax.block_until_ready, which
    # walks every leaf of a pytree (about 1 us a leaf: ~10 ms for these 10,000-leaf dicts,
    # as much as the calls themselves). Plain-Python results have nothing to wait for, so
    # each call here returns None; freeing the result stays inside the timing.
    def drop(fn):
        def call() -> None:
            fn()

        return call

    return {name: fn and drop(fn) for name, fn in impls.items()}


def _tree(n_leaves: int) -> dict:
    # Model-like: blocks -> layers -> {kernel, bias, scale, ...}; four levels deep.
    tree: dict = {}
    i = 0
    b = 0
    while i < n_leaves:
        block = tree.setdefault(f"block_{b}", {})
        for layer in range(10):
            params = {}
            for name in ("kernel", "bias", "scale", "mean", "var"):
                params[name] = i
                i += 1
            block[f"Dense_{layer}"] = {"params": params}
        b += 1
    return tree


def _mixed_tree(n_leaves: int) -> dict:
    # ResNet-like: stages of blocks of convs and norms beside top-level layers, so key
    # lengths change every few leaves (2 to 5 parts).
    tree: dict = {}
    i = 0
    s = 0
    while i < n_leaves:
        stage = tree.setdefault(f"stage_{s}", {})
        stage[f"Conv_{s}"] = {"kernel": i, "bias": i + 1}
        stage["scale"] = i + 2
        i += 3
        for b in range(4):
            stage[f"Block_{b}"] = {
                "Conv_0": {"kernel": i}, "Norm_0": {"scale": i + 1, "bias": i + 2}, "gate": i + 3,
            }
            i += 4
        s += 1
    return tree


def _plain_flatten(xs: dict, prefix: tuple = ()) -> dict:
    out = {}
    for k, v in xs.items():
        if isinstance(v, dict):
            out.update(_plain_flatten(v, prefix + (k,)))
        else:
            out[prefix + (k,)] = v
    return out


def _plain_unflatten(flat: dict) -> dict:
    out: dict = {}
    for path, v in flat.items():
        d = out
        for k in path[:-1]:
            d = d.setdefault(k, {})
        d[path[-1]] = v
    return out


def run(quick: bool) -> list[Result]:
    from flaxen import traverse_util as xtu

    ftu = None
    if have_flax():
        from flax import traverse_util as ftu
    n = 2_000 if quick else 10_000
    rounds = 3 if quick else 7
    tree = _tree(n)
    flat = xtu.flatten_dict(tree)
    joined = xtu.flatten_dict(tree, sep="/")
    mixed = xtu.flatten_dict(_mixed_tree(n))
    results = [
        compare("traverse", f"flatten_dict ({len(flat)} leaves)", _dropped({
            "flaxen": lambda: xtu.flatten_dict(tree),
            "flax": ftu and (lambda: ftu.flatten_dict(tree)),
            "jax": lambda: _plain_flatten(tree),
        }), rounds=rounds),
        compare("traverse", f"unflatten_dict ({len(flat)} leaves)", _dropped({
            "flaxen": lambda: xtu.unflatten_dict(flat),
            "flax": ftu and (lambda: ftu.unflatten_dict(flat)),
            "jax": lambda: _plain_unflatten(flat),
        }), rounds=rounds),
        compare("traverse", f"unflatten_dict(flatten_dict(tree)) ({len(flat)} leaves)", _dropped({
            "flaxen": lambda: xtu.unflatten_dict(xtu.flatten_dict(tree)),
            "flax": ftu and (lambda: ftu.unflatten_dict(ftu.flatten_dict(tree))),
            "jax": lambda: _plain_unflatten(_plain_flatten(tree)),
        }), rounds=rounds),
        compare("traverse", f"flatten_dict(sep='/') ({len(flat)} leaves)", _dropped({
            "flaxen": lambda: xtu.flatten_dict(tree, sep="/"),
            "flax": ftu and (lambda: ftu.flatten_dict(tree, sep="/")),
        }), rounds=rounds, baseline="flax"),
        compare("traverse", f"unflatten_dict(sep='/') ({len(flat)} leaves)", _dropped({
            "flaxen": lambda: xtu.unflatten_dict(joined, sep="/"),
            "flax": ftu and (lambda: ftu.unflatten_dict(joined, sep="/")),
        }), rounds=rounds, baseline="flax"),
        compare("traverse", f"unflatten_dict, mixed depths ({len(mixed)} leaves)", _dropped({
            "flaxen": lambda: xtu.unflatten_dict(mixed),
            "flax": ftu and (lambda: ftu.unflatten_dict(mixed)),
            "jax": lambda: _plain_unflatten(mixed),
        }), rounds=rounds),
        compare("traverse", "flatten_dict(sep='/') + unflatten_dict(sep='/')", _dropped({
            "flaxen": lambda: xtu.unflatten_dict(xtu.flatten_dict(tree, sep="/"), sep="/"),
            "flax": ftu and (lambda: ftu.unflatten_dict(ftu.flatten_dict(tree, sep="/"), sep="/")),
        }), rounds=rounds, baseline="flax"),
        compare("traverse", "flatten_dict(keep_empty_nodes=True)", _dropped({
            "flaxen": lambda: xtu.flatten_dict(tree, keep_empty_nodes=True),
            "flax": ftu and (lambda: ftu.flatten_dict(tree, keep_empty_nodes=True)),
        }), rounds=rounds, baseline="flax"),
    ]
    return results
