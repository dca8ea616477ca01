"""nn.tabulate / Module.tabulate / Module.module_paths (flaxen.linen.summary)."""

import jax
import jax.numpy as jnp

import flaxen.linen as nn
from tests.linen._module_helpers import KEY, Dense

PLAIN = {"force_terminal": False, "width": 120}


class Foo(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = Dense(4)(x)
        return Dense(2)(h)


class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
        return Dense(3)(Dense(3)(x))


class Deep(nn.Module):
    @nn.compact
    def __call__(self, x):
        self.variable("batch_stats", "mean", jnp.zeros, (3,))
        return Block()(x), {"a": x}


def _lines(text):
    return [line.rstrip() for line in text.splitlines()]


def test_table_matches_spec_layout():
    text = Foo().tabulate(KEY, jnp.ones((16, 9)), console_kwargs=PLAIN)
    lines = _lines(text)
    assert lines[1].strip() == "Foo Summary"
    header = lines[3]
    for col in ("path", "module", "inputs", "outputs", "params"):
        assert col in header
    assert "│         │ Foo    │ float32[16,9] │ float32[16,2] │" in text
    assert "│ Dense_0 │ Dense  │ float32[16,9] │ float32[16,4] │ bias: float32[4]" in text
    assert "kernel: float32[9,4]" in text and "40 (160 B)" in text and "10 (40 B)" in text
    assert "Total │ 50 (200 B)" in text
    assert lines[-1].strip() == "Total Parameters: 50 (200 B)"


def test_function_form_other_collections_and_structured_outputs():
    text = nn.tabulate(Deep(), KEY, console_kwargs=PLAIN)(jnp.ones((2, 3)))
    assert "batch_stats" in text and "mean: float32[3]" in text
    assert "- a: float32[2,3]" in text
    assert "Block_0/Dense_1" in text
    assert "Total Parameters: 27 (108 B)" in text  # 2 x (9 + 3) params + 3 stats


def test_depth_folds_hidden_counts_into_shown_ancestor():
    text = nn.tabulate(Deep(), KEY, depth=1, console_kwargs=PLAIN)(jnp.ones((2, 3)))
    assert "Block_0/Dense_0" not in text
    assert "24 (96 B)" in text  # Block_0's row holds both hidden Dense layers


def test_show_repeated_lists_every_call():
    class Twice(nn.Module):
        def setup(self):
            self.d = Dense(3)

        def __call__(self, x):
            return self.d(self.d(x))

    once = Twice().tabulate(KEY, jnp.ones((1, 3)), console_kwargs=PLAIN)
    every = Twice().tabulate(KEY, jnp.ones((1, 3)), show_repeated=True, console_kwargs=PLAIN)
    assert once.count("│ d ") == 1
    assert every.count("│ d ") == 2


def test_compute_flops_columns():
    text = Foo().tabulate(KEY, jnp.ones((4, 9)), compute_flops=True, compute_vjp_flops=True,
                          console_kwargs={"force_terminal": False, "width": 160})
    assert "flops" in text and "vjp_flops" in text


def test_module_paths():
    paths = Deep().module_paths(KEY, jnp.ones((2, 3)))
    # the outer Dense(3) is built first (Dense_0) but called second
    assert list(paths) == ["", "Block_0", "Block_0/Dense_1", "Block_0/Dense_0"]
    assert isinstance(paths["Block_0/Dense_1"], Dense)
    assert paths["Block_0/Dense_1"].features == 3


def test_tabulate_does_not_allocate_parameters():
    calls = []

    def init(key, shape, dtype=jnp.float32):
        calls.append(type(key))
        return jnp.zeros(shape, dtype)

    class P(nn.Module):
        @nn.compact
        def __call__(self, x):
            return x + self.param("p", init, x.shape)

    P().tabulate(KEY, jnp.ones((2,)), console_kwargs=PLAIN)
    assert calls and all(issubclass(t, jax.core.Tracer) for t in calls)
