"""Differential tests: ``Module.tabulate`` / ``nn.tabulate`` print the same text in flaxen and
flax (plain and styled), FLOP columns included.

Flax lists the collection columns in ``set`` order, which changes with the process's string
hash seed; flaxen lists ``params`` first and the rest in the variables' (sorted) order. The
fixture below makes flax use that order so the texts can be compared exactly.
"""

import io

import flax.linen as flax_nn
import flax.linen.summary as flax_summary
import jax
import jax.numpy as jnp
import pytest
import rich.box
import yaml

import flaxen.linen as flaxen_nn
from flaxen.linen import _summary_render

KEY = jax.random.PRNGKey(0)
RNGS = {"params": KEY, "dropout": jax.random.PRNGKey(1)}
PLAIN = {"force_terminal": False, "width": 200}
STYLED = {"force_terminal": True, "width": 200, "color_system": "truecolor"}


@pytest.fixture(autouse=True)
def _flax_collection_order(monkeypatch):
    init = flax_summary.Table.__init__

    def ordered(self, module, collections, rows):
        init(self, module, tuple(sorted(collections, key=lambda c: (c != "params", c))), rows)

    monkeypatch.setattr(flax_summary.Table, "__init__", ordered)


def build(nn):
    """The same family of models on top of either framework."""

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Dense(4)(x))
            return nn.Dense(2)(x)

    class CNN(nn.Module):  # the guide's CNN, small, with BatchNorm, Dropout and `train`
        @nn.compact
        def __call__(self, x, train: bool = False):
            x = nn.Conv(features=4, kernel_size=(3, 3))(x)
            x = nn.BatchNorm(use_running_average=not train)(x)
            x = nn.relu(x)
            x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
            x = nn.Dropout(0.5, deterministic=not train)(x)
            x = x.reshape((x.shape[0], -1))
            return nn.Dense(features=3)(x)

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3)(nn.relu(nn.Dense(3)(x)))

    class Deep(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = Block()(x)
            x = Block()(x)
            return nn.Dense(2)(x)

    class Shared(nn.Module):
        def setup(self):
            self.dense = nn.Dense(3)
            self.head = nn.Dense(1)

        def __call__(self, x):
            return self.head(self.dense(self.dense(x)))

    class Stateful(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Dense(4)(x)
            self.sow("intermediates", "features", h)
            count = self.variable("counter", "n", lambda: jnp.zeros((), jnp.int32))
            count.value += 1
            return nn.BatchNorm(use_running_average=False)(h)

    class Structured(nn.Module):
        @nn.compact
        def __call__(self, x, *, scale=2.0):
            h = nn.Dense(4)(x) * scale
            return {"out": h, "aux": (h, 1)}, [x, None]

    class Encoder(nn.Module):
        def setup(self):
            self.proj = nn.Dense(2)

        def encode(self, x):
            return self.proj(x)

        def __call__(self, x):
            return self.encode(x)

    class Sharded(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3, kernel_init=nn.with_partitioning(
                nn.initializers.lecun_normal(), (None, "model")))(x)

    return dict(MLP=MLP, CNN=CNN, Deep=Deep, Shared=Shared, Stateful=Stateful,
                Structured=Structured, Encoder=Encoder, Sharded=Sharded)


FLAX, FLAXEN = build(flax_nn), build(flaxen_nn)


def both(name, args, rngs=KEY, kwargs=None, **options):
    options.setdefault("console_kwargs", PLAIN)
    texts = [models[name]().tabulate(rngs, *args, **(kwargs or {}), **options)
             for models in (FLAX, FLAXEN)]
    return texts


def assert_same(name, args, **options):
    ref, ours = both(name, args, **options)
    assert ours == ref, "\n" + ref + "\n" + ours


X2 = jnp.ones((2, 3))
IMG = jnp.ones((1, 6, 6, 1))


def test_mlp():
    assert_same("MLP", (X2,))


def test_mlp_styled():
    assert_same("MLP", (X2,), console_kwargs=STYLED)


@pytest.mark.parametrize("train", [False, True])
def test_guide_cnn_with_train_kwarg(train):
    assert_same("CNN", (IMG,), rngs=RNGS, kwargs={"train": train})


def test_guide_cnn_styled():
    assert_same("CNN", (IMG,), rngs=RNGS, kwargs={"train": True}, console_kwargs=STYLED)


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_depth(depth):
    assert_same("Deep", (X2,), depth=depth)


def test_depth_styled():
    assert_same("Deep", (X2,), depth=1, console_kwargs=STYLED)


@pytest.mark.parametrize("show_repeated", [False, True])
def test_shared_submodule_called_twice(show_repeated):
    assert_same("Shared", (X2,), show_repeated=show_repeated)


def test_flops_mlp():
    assert_same("MLP", (X2,), compute_flops=True, compute_vjp_flops=True)


@pytest.mark.parametrize("train", [False, True])
def test_flops_cnn(train):
    assert_same("CNN", (IMG,), rngs=RNGS, kwargs={"train": train}, compute_flops=True,
                compute_vjp_flops=True)


def test_only_vjp_flops_with_depth():
    assert_same("Deep", (X2,), depth=1, compute_vjp_flops=True)


@pytest.mark.parametrize("mutable", [True, ["params", "batch_stats", "counter"]])
def test_collections_and_sown_intermediates(mutable):
    assert_same("Stateful", (X2,), mutable=mutable)


def test_collections_styled():
    assert_same("Stateful", (X2,), mutable=True, console_kwargs=STYLED)


def test_dict_and_tuple_outputs_and_keyword_inputs():
    assert_same("Structured", (X2,), kwargs={"scale": 3.0}, compute_flops=True)


def test_other_method():
    assert_same("Encoder", (X2,))
    assert_same("Encoder", (X2,), kwargs={"method": "encode"}, console_kwargs=STYLED)


def test_partitioned_params():
    assert_same("Sharded", (X2,))


def test_table_and_column_kwargs():
    assert_same("MLP", (X2,), table_kwargs={"box": rich.box.ASCII, "caption_justify": "left"},
                column_kwargs={"justify": "right", "no_wrap": True})


def test_function_form_and_default_console():
    texts = [nn.tabulate(models["CNN"](), RNGS, depth=1)(IMG, train=True)
             for nn, models in ((flax_nn, FLAX), (flaxen_nn, FLAXEN))]
    assert texts[1] == texts[0]


def test_module_paths():
    ref, ours = (models["Shared"]().module_paths(KEY, X2) for models in (FLAX, FLAXEN))
    assert list(ours) == list(ref)
    assert [type(m).__name__ for m in ours.values()] == [type(m).__name__ for m in ref.values()]


# The YAML-style layout of cells, against PyYAML (what flax uses).
@pytest.mark.parametrize("value", [
    ("a", "b"),
    {"aux": ("y", "1"), "out": "x"},
    (("a", "b"), "c"),
    ({"k": "v", "k2": "w"}, "c"),
    {"a": {"b": "c", "d": ("e", {"f": "g"})}},
    {"a": (), "b": {}},
    ("[dim]float32[/dim][2,4]", "True", "None", "yes"),
    ("x" * 85 + " " + "y" * 10 + " z",),
    {"key": "w " * 50},
    {"key": "w " * 50 + "v"},
    {"a": {"b": ("[dim]float32[/dim][3,4] [dim]P[/dim](None, 'model') " * 3,)}},
])
def test_layout_matches_yaml(value):
    f = io.StringIO()
    yaml.safe_dump(value, f, default_flow_style=False, indent=2, sort_keys=False)
    expected = f.getvalue().replace("\n...", "").replace("'", "").strip()
    assert _summary_render.layout(value) == expected
