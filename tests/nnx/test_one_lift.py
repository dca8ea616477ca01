"""Issue 21: every NNX transform lifts through ``flaxen.nnx._lift`` (the loops included), and
no private transform file is named after a function it exports."""

import ast
import pathlib

import jax
import jax.numpy as jnp
import pytest

from flaxen import nnx
from flaxen.errors import NNXTransformError
from flaxen.nnx import _lift

TRANSFORMS = pathlib.Path(nnx.__file__).parent / "transforms"


# -- the roots mode the loops use --------------------------------------------------------------

def test_roots_mode_walks_arrays_with_argument_paths():
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    x = jnp.ones(3)
    lift = _lift.Lift((m, (x, 5)), {}, roots=True)
    paths = lift.paths
    assert (0, "bias") in paths and (0, "kernel") in paths
    assert (1, 0) in paths  # an array inside a plain tuple is a State leaf too
    assert lift.leaf_objs[paths.index((1, 0))] is x
    assert len(lift.values) == len(paths) == 3  # the Python int stays static


def test_roots_mode_write_back_updates_in_place_and_builds_new():
    v = nnx.Variable(jnp.array(1.0))
    lift = _lift.Lift(((v, jnp.array(2.0)),), {}, roots=True)
    (state,), _, inner = _lift.enter(lift.static, lift.values, lift.leaves)
    assert state[0] is not v and inner.built[0] is state[0]
    state[0][...] = state[0][...] + state[1]
    (new_state,) = lift.write_back(lift.static.defs, [state[0].raw_value, state[1]])
    assert new_state[0] is v and float(v[...]) == 3.0
    assert isinstance(new_state, tuple) and new_state is not state


def test_check_carry_refuses_other_objects_and_new_structure():
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    lift = _lift.Lift((m,), {}, roots=True)
    (copy,), _, inner = _lift.enter(lift.static, lift.values, lift.leaves)
    from flaxen.nnx import _graph_engine as eng

    same = eng.flatten([copy], root_paths=[(0,)])
    _lift.check_carry(lift, same.defs, same.refs, inner.built, "loop", "same objects")
    copy.bias = nnx.Param(jnp.zeros(2))  # a new Variable where the input had one
    swapped = eng.flatten([copy], root_paths=[(0,)])
    with pytest.raises(NNXTransformError, match="loop: same objects.*different object"):
        _lift.check_carry(lift, swapped.defs, swapped.refs, inner.built, "loop",
                          "same objects")
    (copy2,), _, inner2 = _lift.enter(lift.static, lift.values, lift.leaves)
    copy2.zzz = nnx.Param(jnp.zeros(1))  # an attribute the input did not have
    grown = eng.flatten([copy2], root_paths=[(0,)])
    with pytest.raises(NNXTransformError, match="changed its structure"):
        _lift.check_carry(lift, grown.defs, grown.refs, inner2.built, "loop", "x")


# -- the loops through it --------------------------------------------------------------------

def test_fori_loop_keeps_objects_and_refuses_new_variables():
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    pair = (m, m)  # shared references survive the loop

    def step(i, p):
        p[0].bias[...] += 1.0
        return p

    out = nnx.fori_loop(0, 3, step, pair)
    assert out[0] is m and out[1] is m and m.bias[...].tolist() == [3.0, 3.0]

    def bad(i, mod):
        mod.bias = nnx.Param(mod.bias[...] + 1)
        return mod

    with pytest.raises(NNXTransformError, match="Carry references must be the same"):
        nnx.fori_loop(0, 2, bad, m)
    with pytest.raises(NNXTransformError, match="Variable identity must be preserved"):
        nnx.fori_loop(0, 2, bad, m, graph_updates=False)


def test_while_loop_structure_change_is_refused():
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))

    def grow(val):
        mod, n = val
        mod.zzz = nnx.Param(jnp.zeros(1))  # after the inputs' attributes in walk order
        return mod, n - 1

    with pytest.raises(NNXTransformError, match="changed its structure"):
        nnx.while_loop(lambda val: val[1] > 0, grow, (m, 2))


def test_scan_carry_and_scanned_state_through_the_lift():
    v = nnx.Variable(jnp.array(0.0))
    xs = nnx.Variable(jnp.arange(4.0))

    @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))
    def step(c, x):
        c[...] += x[...]
        x[...] = x[...] * 10
        return c, c[...]

    c, ys = step(v, xs)
    assert c is v and float(v[...]) == 6.0
    assert ys.tolist() == [0.0, 1.0, 3.0, 6.0]
    assert xs[...].tolist() == [0.0, 10.0, 20.0, 30.0]

    def swap(c, x):
        return nnx.Variable(c[...] + x), x

    with pytest.raises(NNXTransformError, match="scan Variable identity must be preserved"):
        nnx.scan(swap, graph_updates=False)(nnx.Variable(jnp.array(0.0)), jnp.arange(3.0))


def test_scan_under_jit_in_every_mode():
    for kw in ({}, {"graph_updates": False}, {"graph": False}):
        count = nnx.Variable(jnp.array(0))

        @nnx.jit(**kw)
        def run(c, xs, kw=kw):
            def body(c, x):
                c[...] += x
                return c, x * 2

            _, ys = nnx.scan(body, **kw)(c, xs)
            return ys

        ys = run(count, jnp.arange(3))
        assert int(count[...]) == 3 and ys.tolist() == [0, 2, 4], kw


# -- file names ------------------------------------------------------------------------------

def _exported(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            names.add(node.name)
    return names


def test_no_private_transform_file_named_after_its_export():
    offenders = []
    for path in sorted(TRANSFORMS.glob("_*.py")):
        if path.name == "__init__.py":
            continue
        stem = path.stem.lstrip("_")
        if stem in _exported(path):
            offenders.append(path.name)
    assert offenders == []
    assert not (TRANSFORMS / "_carry.py").exists()  # the loops' own primitive is gone


def test_loops_import_no_second_primitive():
    for name in ("_loops.py", "_axis_loop.py"):
        src = (TRANSFORMS / name).read_text()
        assert "Flat(" not in src and "rebuild(" not in src, name
        assert "_lift.enter(" in src and "write_back(" in src, name


def test_jit_of_fori_loop_matches_eager():
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    ref = nnx.clone(m)

    def step(i, mod):
        mod.kernel[...] = mod.kernel[...] * 2
        return mod

    nnx.jit(lambda mod: nnx.fori_loop(0, 2, step, mod))(m)
    nnx.fori_loop(0, 2, step, ref)
    assert jnp.allclose(m.kernel[...], ref.kernel[...])
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(
        lambda a, b: bool(jnp.allclose(a, b)), nnx.state(m), nnx.state(ref)))


# -- the functional modes are a branch of the same primitive ---------------------------------

def test_functional_exit_returns_input_values_then_output_values():
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    lift = _lift.Lift((m,), {})

    def f(mod):
        mod.bias[...] = mod.bias[...] + 1.0
        mod.extra = nnx.Param(jnp.ones(1))  # a structure change: not written back
        return nnx.Linear(1, 1, rngs=nnx.Rngs(1))

    values, out_leaves = lift.pure(f, functional="jit")(lift.values, lift.leaves)
    ostatic = lift.out
    assert ostatic.functional and ostatic.n_input_leaves == 2
    assert len(values) == 4  # bias and kernel of m, then of the new Linear
    out = lift.finish(ostatic, values, out_leaves)
    assert isinstance(out, nnx.Linear) and out is not m
    assert m.bias[...].tolist() == [1.0, 1.0] and not hasattr(m, "extra")


def test_functional_exit_refuses_an_output_aliasing_an_input():
    v = nnx.Variable(jnp.array(1.0))
    lift = _lift.Lift((v,), {})
    with pytest.raises(NNXTransformError, match="does not support Variable aliasing"):
        lift.pure(lambda v: v, functional="jit")(lift.values, lift.leaves)


def test_graph_mode_finish_is_unchanged_by_the_branch():
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    lift = _lift.Lift((m,), {})

    def f(mod):
        mod.extra = nnx.Param(jnp.ones(1))
        return mod

    values, out_leaves = lift.pure(f)(lift.values, lift.leaves)
    assert not lift.out.functional
    assert lift.finish(lift.out, values, out_leaves) is m and m.extra[...].tolist() == [1.0]


@pytest.mark.parametrize("kw", [{"graph_updates": False}, {"graph": False}])
def test_mapped_transforms_one_body_in_functional_modes(kw):
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    count = nnx.Variable(jnp.zeros(4))

    def f(c, x):
        c[...] = c[...] + 1
        return m(x)

    # vmap: the input Variable's batched value comes back with its in_axes
    out = nnx.vmap(f, in_axes=(0, 0), **kw)(count, jnp.ones((4, 2)))
    assert out.shape == (4, 3) and count[...].tolist() == [1.0] * 4

    # remat (no mapped axes) and cond go through the same body
    y = nnx.remat(lambda c: c[...] * 2, **kw)(count)
    assert y.tolist() == [2.0] * 4
    nnx.cond(True, lambda c: c.__setitem__(..., c[...] + 1), lambda c: None, count, **kw)
    assert count[...].tolist() == [2.0] * 4

    with pytest.raises(NNXTransformError, match="Duplicate"):
        nnx.vmap(lambda c: c, **kw)(count)


def test_custom_vjp_functional_mode_uses_the_branch():
    m = nnx.Linear(2, 1, rngs=nnx.Rngs(0))

    @nnx.custom_vjp(graph_updates=False)
    def f(mod, x):
        return (mod(x) ** 2).sum()

    def fwd(mod, x):
        return f(mod, x), (mod(x), x)

    def bwd(res, g):
        y, x = res
        gm = jax.tree_util.tree_map(jnp.zeros_like, nnx.clone(m))
        gm.bias[...] = jnp.sum(2 * y * g, axis=0)
        return gm, 2 * y @ m.kernel[...].T * g

    f.defvjp(fwd, bwd)
    x = jnp.ones((3, 2))
    gx = jax.grad(lambda x: f(m, x))(x)
    assert gx.shape == (3, 2)


@pytest.mark.parametrize("kw", [{"graph_updates": False}, {"graph": False}])
def test_public_transforms_finish_through_the_primitive_in_functional_modes(kw, monkeypatch):
    # jit, grad, value_and_grad, vjp, jvp, eval_shape and checkify have one body: their
    # functional modes end in Lift.finish's functional branch, not in a second write-back
    from flaxen.nnx.transforms import _functional

    seen = []
    finish = _lift.Lift.finish

    def counting(self, out, *a, **k):
        seen.append(out.functional)
        return finish(self, out, *a, **k)

    monkeypatch.setattr(_lift.Lift, "finish", counting)

    def bump(c, x):
        c[...] = c[...] + 1.0
        return jnp.sum(x * c[...])

    def bump_new(c, x):
        return bump(c, x), nnx.Variable(x)  # a node in the output is built new outside

    c = nnx.Variable(jnp.array(0.0))
    x = jnp.array(2.0)
    out, v = nnx.jit(bump_new, **kw)(c, x)
    assert float(out) == 2.0 and isinstance(v, nnx.Variable) and float(c[...]) == 1.0
    assert float(nnx.grad(bump, argnums=1, **kw)(c, x)) == 2.0 and float(c[...]) == 2.0
    (loss, aux), g = nnx.value_and_grad(bump_new, argnums=1, has_aux=True, **kw)(c, x)
    assert float(loss) == 6.0 and isinstance(aux, nnx.Variable) and float(c[...]) == 3.0
    out, vjp_fn = nnx.vjp(bump, c, x, **kw)
    assert float(out) == 8.0 and float(vjp_fn(jnp.array(1.0))[1]) == 4.0
    assert float(c[...]) == 4.0
    out, t = nnx.jvp(bump, (c, x), (nnx.Variable(jnp.array(0.0)), jnp.array(1.0)), **kw)
    assert (float(out), float(t), float(c[...])) == (10.0, 5.0, 5.0)
    shape = nnx.eval_shape(bump_new, c, x, **kw)
    assert shape[0].shape == () and float(c[...]) == 5.0  # eval_shape leaves inputs alone
    err, out = nnx.checkify(bump, **kw)(c, x)
    assert err.get() is None and float(out) == 12.0 and float(c[...]) == 6.0
    assert seen == [True] * 7
    assert not hasattr(_functional, "run") and not hasattr(_functional, "finish")


def test_prefix_mapping_is_an_abc_with_map_prefix():
    # Flax's extract.PrefixMapping: abstract, its one method map_prefix(path, variable, /)
    import abc

    from flaxen.nnx import extract
    from flaxen.nnx.transforms import autodiff, compilation, iteration

    assert isinstance(extract.PrefixMapping, abc.ABCMeta)
    assert extract.PrefixMapping.__abstractmethods__ == frozenset({"map_prefix"})
    with pytest.raises(TypeError, match="abstract"):
        extract.PrefixMapping()

    class NoMethod(extract.PrefixMapping):
        pass

    with pytest.raises(TypeError, match="map_prefix"):
        NoMethod()
    p = nnx.Param(jnp.ones(1))
    axes = iteration.StateAxes({nnx.Param: 0, ...: None})
    diff = autodiff.DiffState(0, nnx.Param)
    sharding = compilation.StateSharding({nnx.Param: "p", ...: None})
    for obj, expected in ((axes, 0), (diff, True), (sharding, "p")):
        assert isinstance(obj, extract.PrefixMapping)
        assert obj.map_prefix(("w",), p) == expected


@pytest.mark.parametrize("graph", [True, False])
def test_eval_shape_functional_modes_refuse_a_variable_passed_twice(graph):
    v = nnx.Param(jnp.array(1.0))
    with pytest.raises(ValueError, match="Duplicate"):
        nnx.eval_shape(lambda a, b: None, v, v, graph=graph, graph_updates=False)


def test_state_sharding_of_a_state_matches_by_exact_path():
    spec = nnx.State({"kernel": "k", "bias": "b"})
    s = nnx.StateSharding(spec)
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    assert s.map_prefix(("kernel",), m.kernel) == "k"
    assert s.map_prefix(("bias",), m.bias) == "b"
