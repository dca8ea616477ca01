"""nn.tabulate / Module.tabulate / Module.module_paths (flaxen.linen.summary)."""

import re

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
    assert lines[-2].strip() == "Total Parameters: 50 (200 B)" and lines[-1] == ""


def test_function_form_other_collections_and_structured_outputs():
    text = nn.tabulate(Deep(), KEY, console_kwargs=PLAIN)(jnp.ones((2, 3)))
    assert "batch_stats" in text and "mean: float32[3]" in text
    assert "│ - float32[2,3]    │" in text and "│ - a: float32[2,3] │" in text
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


GUIDE_CNN = """\
                                  CNN Summary
┏━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━┓
┃ path    ┃ module ┃ inputs            ┃ outputs           ┃ params            ┃
┡━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━┩
│         │ CNN    │ float32[1,28,28,… │ float32[1,10]     │                   │
├─────────┼────────┼───────────────────┼───────────────────┼───────────────────┤
│ Conv_0  │ Conv   │ float32[1,28,28,… │ float32[1,28,28,… │ bias: float32[32] │
│         │        │                   │                   │ kernel:           │
│         │        │                   │                   │ float32[3,3,1,32] │
│         │        │                   │                   │                   │
│         │        │                   │                   │ 320 (1.3 KB)      │
├─────────┼────────┼───────────────────┼───────────────────┼───────────────────┤
│ Conv_1  │ Conv   │ float32[1,14,14,… │ float32[1,14,14,… │ bias: float32[64] │
│         │        │                   │                   │ kernel:           │
│         │        │                   │                   │ float32[3,3,32,6… │
│         │        │                   │                   │                   │
│         │        │                   │                   │ 18,496 (74.0 KB)  │
├─────────┼────────┼───────────────────┼───────────────────┼───────────────────┤
│ Dense_0 │ Dense  │ float32[1,3136]   │ float32[1,256]    │ bias:             │
│         │        │                   │                   │ float32[256]      │
│         │        │                   │                   │ kernel:           │
│         │        │                   │                   │ float32[3136,256] │
│         │        │                   │                   │                   │
│         │        │                   │                   │ 803,072 (3.2 MB)  │
├─────────┼────────┼───────────────────┼───────────────────┼───────────────────┤
│ Dense_1 │ Dense  │ float32[1,256]    │ float32[1,10]     │ bias: float32[10] │
│         │        │                   │                   │ kernel:           │
│         │        │                   │                   │ float32[256,10]   │
│         │        │                   │                   │                   │
│         │        │                   │                   │ 2,570 (10.3 KB)   │
├─────────┼────────┼───────────────────┼───────────────────┼───────────────────┤
│         │        │                   │             Total │ 824,458 (3.3 MB)  │
└─────────┴────────┴───────────────────┴───────────────────┴───────────────────┘

                       Total Parameters: 824,458 (3.3 MB)
"""


class CNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(features=32, kernel_size=(3, 3))(x))
        x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
        x = nn.relu(nn.Conv(features=64, kernel_size=(3, 3))(x))
        x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(features=256)(x))
        return nn.Dense(features=10)(x)


def test_quickstart_guide_table_exactly():
    text = CNN().tabulate(KEY, jnp.ones((1, 28, 28, 1)),
                          console_kwargs={"force_terminal": False, "width": 80})
    assert "\n".join(_lines(text)) == "\n" + GUIDE_CNN


class Shared(nn.Module):
    def setup(self):
        self.d = Dense(3)

    def __call__(self, x):
        return self.d(self.d(x))


def test_repeated_calls_list_no_variables():
    text = Shared().tabulate(KEY, jnp.ones((1, 3)), show_repeated=True, console_kwargs=PLAIN)
    assert text.count("bias: float32[3]") == 1
    assert text.count("12 (48 B)") == 3  # first row, total, caption


def test_depth_fold_count_on_first_line():
    text = nn.tabulate(Deep(), KEY, depth=1, console_kwargs=PLAIN)(jnp.ones((2, 3)))
    row = next(line for line in _lines(text) if line.startswith("│ Block_0"))
    assert "│ 24 (96 B) │" in row


class Train(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        h = Dense(4)(x)
        self.sow("intermediates", "h", h)
        self.variable("batch_stats", "n", jnp.zeros, ())
        return nn.Dropout(0.5, deterministic=not train)(h), {"aux": (h, 1)}


def test_keyword_inputs_sown_tuples_structured_outputs_and_column_order():
    text = Train().tabulate({"params": KEY, "dropout": KEY}, jnp.ones((2, 3)), train=True,
                            mutable=True, compute_flops=True,
                            console_kwargs={"force_terminal": False, "width": 250})
    lines = _lines(text)
    header = [name.strip() for name in lines[3].split("┃")[1:-1]]
    assert header == ["path", "module", "inputs", "outputs", "flops", "params", "batch_stats",
                      "intermediates"]
    top = [line.split("│") for line in lines if line.startswith("│ ")][:4]
    assert [r[3].strip() for r in top] == ["- float32[2,3]", "- train: True", "", ""]
    assert [r[4].strip() for r in top] == ["- float32[2,4]", "- aux:", "- float32[2,4]", "- 1"]
    assert top[0][5].strip().isdigit()  # the bool argument is static: the call has a cost
    assert [r[8].strip() for r in top[:4]] == ["h:", "- float32[2,4]", "", "8 (32 B)"]


def test_styles():
    text = Foo().tabulate(KEY, jnp.ones((16, 9)), method="__call__",
                          console_kwargs={"force_terminal": True, "width": 120})
    assert "\x1b[2mfloat32\x1b[0m[16,9]" in text  # dtypes dimmed
    assert "\x1b[1m40 \x1b[0m\x1b[1;2m(160 B)\x1b[0m" in text  # counts bold, sizes dim
    assert re.search("\x1b\\[1m +Total\x1b\\[0m", text)  # footer bold
    assert "Total Parameters: 50 \x1b[0m\x1b[1;2m(200 B)" in text  # caption bold
    assert text.endswith("\n\n")
