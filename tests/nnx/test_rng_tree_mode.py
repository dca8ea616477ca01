"""with_rngs in tree mode copies the streams, but the keys it draws come from the caller's
streams: their counts advance exactly as in graph mode."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from flaxen import nnx


@pytest.mark.parametrize("graph", [True, False])
def test_split_and_fork_advance_the_callers_count_in_both_modes(graph):
    rngs = nnx.Rngs(params=0, dropout=1)
    key_before = np.asarray(jax.random.key_data(rngs.params.key[...]))
    new = nnx.with_rngs(rngs, split={"params": 4}, fork="dropout", graph=graph,
                        graph_updates=False)
    assert int(rngs.params.count[...]) == 1 and int(rngs.dropout.count[...]) == 1
    np.testing.assert_array_equal(jax.random.key_data(rngs.params.key[...]), key_before)
    assert new.params.key[...].shape == (4,)
    # the next key the caller draws is not one the copy was given
    nxt = np.asarray(jax.random.key_data(rngs.params()))
    given = np.asarray(jax.random.key_data(new.params.key[...]))
    assert not any(np.array_equal(nxt, g) for g in given)


def test_streams_without_a_rule_are_left_alone_in_tree_mode():
    rngs = nnx.Rngs(params=0, dropout=1)
    new = nnx.with_rngs(rngs, split={"params": 2}, graph=False, graph_updates=False)
    assert int(rngs.dropout.count[...]) == 0
    new.dropout()  # the copy's stream is its own
    assert int(rngs.dropout.count[...]) == 0 and int(new.dropout.count[...]) == 1
