"""Differential tests: the same models in flaxen.linen and flax.linen give the same trees,
names, bit-identical parameters for the same key, and the same outputs."""

import flax.linen as flax_nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxen.linen as flaxen_nn

KEY = jax.random.PRNGKey(0)


def build(nn):
    """Builds the same family of models on top of either framework."""

    class Dense(nn.Module):
        features: int

        @nn.compact
        def __call__(self, x):
            k = self.param("kernel", jax.nn.initializers.lecun_normal(),
                           (x.shape[-1], self.features))
            b = self.param("bias", jax.nn.initializers.normal(0.1), (self.features,))
            return x @ k + b

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            for f in (5, 4, 3):
                x = jax.nn.relu(Dense(f)(x))
            return x

    class Conv1x1(nn.Module):  # a conv-free "CNN" block: per-pixel projection
        features: int

        @nn.compact
        def __call__(self, x):
            k = self.param("kernel", jax.nn.initializers.lecun_normal(),
                           (x.shape[-1], self.features))
            return jnp.einsum("nhwc,cf->nhwf", x, k)

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = jax.nn.relu(Conv1x1(4)(x))
            x = jax.nn.relu(Conv1x1(6)(x))
            x = x.reshape((x.shape[0], -1))
            return Dense(2)(x)

    class SetupList(nn.Module):
        def setup(self):
            self.layers = [Dense(3), Dense(4)]
            self.head = {"out": Dense(2)}

        def __call__(self, x):
            for layer in self.layers:
                x = layer(x)
            return self.head["out"](x)

    class Sower(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = Dense(3)(x)
            self.sow("intermediates", "h", h)
            self.sow("intermediates", "h", 2 * h)
            self.sow("stats", "sum", h, init_fn=lambda: 0.0, reduce_fn=lambda a, b: a + b)
            return Dense(2)(h)

    class RunningMean(nn.Module):  # BatchNorm-like mutable state
        @nn.compact
        def __call__(self, x):
            initialized = self.has_variable("batch_stats", "mean")
            mean = self.variable("batch_stats", "mean", jnp.zeros, x.shape[1:])
            if initialized:
                mean.value = 0.9 * mean.value + 0.1 * x.mean(0)
            return x - mean.value + self.param("bias", jax.nn.initializers.zeros,
                                               x.shape[1:])

    class Mixed(nn.Module):  # setup submodules used from a compact method + shared module
        def setup(self):
            self.enc = Dense(4)
            self.shared = Dense(4)

        @nn.compact
        def __call__(self, x):
            x = self.shared(self.enc(x))
            x = self.shared(x)
            x = Dense(3, name="named")(x)
            x = SetupList()(x)
            noise = jax.random.normal(self.make_rng("noise"), x.shape)
            return RunningMean()(x) + 0 * noise

    class Wrapper(nn.Module):
        inner: nn.Module
        others: tuple = ()

        @nn.compact
        def __call__(self, x):
            x = self.inner(x)
            for o in self.others:
                x = o(x)
            return x

    return dict(Dense=Dense, MLP=MLP, CNN=CNN, SetupList=SetupList, Sower=Sower,
                RunningMean=RunningMean, Mixed=Mixed, Wrapper=Wrapper)


FLAXEN = build(flaxen_nn)
FLAX = build(flax_nn)


def assert_same_tree(a, b):
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for path, (x, y) in zip(jax.tree_util.tree_leaves_with_path(a),
                            zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=str(path[0]))


CASES = {
    "MLP": (lambda M: M["MLP"](), jnp.ones((2, 6))),
    "CNN": (lambda M: M["CNN"](), jnp.ones((1, 3, 3, 2))),
    "SetupList": (lambda M: M["SetupList"](), jnp.ones((2, 5))),
    "Sower": (lambda M: M["Sower"](), jnp.ones((2, 5))),
    "RunningMean": (lambda M: M["RunningMean"](), jnp.ones((4, 3))),
    "Mixed": (lambda M: M["Mixed"](), jnp.ones((2, 4))),
    "Wrapper": (lambda M: M["Wrapper"](M["Dense"](3), (M["Dense"](2), M["MLP"]())),
                jnp.ones((2, 4))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_init_and_apply_match_flax(case):
    make, x = CASES[case]
    rngs = {"params": KEY, "noise": jax.random.PRNGKey(1)}
    ours, theirs = make(FLAXEN), make(FLAX)
    v_ours, v_theirs = ours.init(rngs, x), theirs.init(rngs, x)
    assert_same_tree(v_ours, v_theirs)
    # creation order of the returned dicts matches too
    assert list(v_ours) == list(v_theirs)
    assert list(v_ours["params"]) == list(v_theirs["params"])
    mutable = [c for c in ("batch_stats", "intermediates", "stats") if c != "params"]
    out_ours = ours.apply(v_ours, x, rngs=rngs, mutable=mutable)
    out_theirs = theirs.apply(v_theirs, x, rngs=rngs, mutable=mutable)
    assert_same_tree(out_ours, out_theirs)


@pytest.mark.parametrize("case", ["MLP", "Mixed", "Sower"])
def test_capture_intermediates_matches_flax(case):
    make, x = CASES[case]
    rngs = {"params": KEY, "noise": jax.random.PRNGKey(1)}
    ours, theirs = make(FLAXEN), make(FLAX)
    v = theirs.init(rngs, x)
    for capture in (True, lambda m, name: type(m).__name__ == "Dense"):
        a = ours.apply(v, x, rngs=rngs, capture_intermediates=capture, mutable=["batch_stats"])
        b = theirs.apply(v, x, rngs=rngs, capture_intermediates=capture,
                         mutable=["batch_stats"])
        assert_same_tree(a, b)


def test_gradients_match_flax():
    make, x = CASES["MLP"]
    v = make(FLAX).init(KEY, x)
    g_ours = jax.grad(lambda p: make(FLAXEN).apply(p, x).sum())(v)
    g_theirs = jax.grad(lambda p: make(FLAX).apply(p, x).sum())(v)
    assert_same_tree(g_ours, g_theirs)


def test_module_paths_and_repeated_make_rng_match_flax():
    class Keys:
        pass

    def keys(nn):
        class K(nn.Module):
            @nn.compact
            def __call__(self):
                return [self.make_rng("dropout") for _ in range(3)]

        class Outer(nn.Module):
            def setup(self):
                self.k = K()

            def __call__(self):
                return self.k() + self.k()

        return Outer()

    a = keys(flaxen_nn).apply({}, rngs={"dropout": KEY})
    b = keys(flax_nn).apply({}, rngs={"dropout": KEY})
    assert_same_tree(a, b)
    make, x = CASES["Mixed"]
    rngs = {"params": KEY, "noise": KEY}
    assert list(make(FLAXEN).module_paths(rngs, x)) == list(make(FLAX).module_paths(rngs, x))


def test_tabulate_matches_flax_text():
    class_ours = FLAXEN["MLP"]
    class_theirs = FLAX["MLP"]
    kw = {"console_kwargs": {"force_terminal": False, "width": 120}}
    ours = class_ours().tabulate(KEY, jnp.ones((2, 6)), **kw)
    theirs = class_theirs().tabulate(KEY, jnp.ones((2, 6)), **kw)
    assert [line.rstrip() for line in ours.strip().splitlines()] == [
        line.rstrip() for line in theirs.strip().splitlines()]


def _two_compact_methods(nn):
    class Two(nn.Module):
        @nn.compact
        def __call__(self, x):
            return self.other(nn.Dense(2)(x))

        @nn.compact
        def other(self, x):
            return nn.Dense(1)(x)

    return Two().init(KEY, jnp.ones((1, 3)))["params"]


def test_two_compact_methods_same_tree_as_flax():
    # today's Flax allows several @compact methods; their submodules share one naming count
    ours, theirs = _two_compact_methods(flaxen_nn), _two_compact_methods(flax_nn)
    assert sorted(ours) == sorted(theirs) == ["Dense_0", "Dense_1"]
    for a, b in zip(jax.tree.leaves(dict(ours)), jax.tree.leaves(dict(theirs))):
        np.testing.assert_array_equal(a, b)


def test_generated_init_introspection_matches_flax():
    import dataclasses
    import inspect

    def describe(nn):
        class Plain(nn.Module):
            features: int
            use_bias: bool = True

        class KeywordOnly(nn.Module, kw_only=True):
            size: int = 1

        out = []
        for cls in (Plain, KeywordOnly, nn.Dense, nn.LayerNorm):
            sig = inspect.signature(cls)
            out.append((
                cls.__match_args__,
                list(cls.__init__.__annotations__),
                cls.__init__.__annotations__["return"],
                [(p.name, p.kind) for p in sig.parameters.values()],
                sig.return_annotation,
                [isinstance(f.type, str) for f in dataclasses.fields(cls)],
                list(cls.__annotations__)[-2:],
            ))
        out.append(tuple(nn.Dense.__init__.__annotations__[k] for k in ("features", "use_bias")))
        return out

    assert describe(flaxen_nn) == describe(flax_nn)
