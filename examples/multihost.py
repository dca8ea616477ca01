"""Multi-host training with logical axis sharding: one program, run once per host.

Every host (process) runs this same script. ``jax.distributed.initialize`` connects the
processes; afterwards ``jax.devices()`` lists the devices of *all* hosts, so one global
``Mesh`` spans them, and ``jax.jit`` with ``NamedSharding`` runs one SPMD program over it.
Each host feeds only its own slice of the batch
(``jax.make_array_from_process_local_data``) and reads back only what it holds.

The model is a stack of layers made with ``nn.scan`` over ``LogicalDotReluDot`` blocks whose
parameters carry logical axis names (``'embed'``, ``'hidden'``, plus ``'layer'`` added by the
scan); the rules map them onto the mesh axes ``('data', 'model')``.

Run it on one machine (8 simulated CPU devices, a single process)::

    python examples/multihost.py

On a cluster, start it on every host as JAX documents for ``jax.distributed.initialize``::

    # host i of N (e.g. from your launcher's environment)
    python examples/multihost.py --coordinator 10.0.0.1:1234 --num-processes N --process-id i

On Cloud TPU, SLURM or Open MPI, ``jax.distributed.initialize()`` finds these values
itself: pass ``--auto``. To try two processes on one CPU machine (4 devices each)::

    export JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=4
    python examples/multihost.py --num-processes 2 --process-id 1 &
    python examples/multihost.py --num-processes 2 --process-id 0
"""

from __future__ import annotations

import argparse
import os
import sys

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    # A single CPU process pretends to have 8 devices, so the mesh below can be built.
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402 - XLA_FLAGS must be set before JAX starts
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import flaxen.linen as nn  # noqa: E402
from flaxen.training import train_state  # noqa: E402

RULES = (("batch", "data"), ("hidden", "model"), ("embed", None), ("layer", None))


class LogicalDotReluDot(nn.Module):
    """``relu(x @ W1) @ W2`` with logically named weights and activations."""

    depth: int

    @nn.compact
    def __call__(self, x, _):
        init = nn.initializers.xavier_normal()
        w1 = self.param("W1", nn.with_logical_partitioning(init, ("embed", "hidden")),
                        (x.shape[-1], self.depth))
        y = nn.with_logical_constraint(jax.nn.relu(x @ w1), ("batch", "hidden"))
        w2 = self.param("W2", nn.with_logical_partitioning(init, ("hidden", "embed")),
                        (self.depth, x.shape[-1]))
        return nn.with_logical_constraint(y @ w2, ("batch", "embed")), None


class MLP(nn.Module):
    layers: int
    depth: int

    @nn.compact
    def __call__(self, x):
        stack = nn.scan(LogicalDotReluDot, length=self.layers, variable_axes={"params": 0},
                        split_rngs={"params": True},
                        metadata_params={nn.PARTITION_NAME: "layer"})
        x, _ = stack(self.depth)(x, None)
        return x


def initialize(args: argparse.Namespace) -> None:
    """Connects the processes (a no-op for a single process)."""
    if args.auto:
        jax.distributed.initialize()
    elif args.num_processes > 1:
        jax.distributed.initialize(coordinator_address=args.coordinator,
                                   num_processes=args.num_processes,
                                   process_id=args.process_id)


def global_mesh(model_parallel: int) -> Mesh:
    """A ``('data', 'model')`` mesh over the devices of every process."""
    devices = np.asarray(jax.devices())
    if devices.size % model_parallel:
        raise SystemExit(f"{devices.size} devices cannot be split into model-parallel groups "
                         f"of {model_parallel}; pass --model-parallel dividing it.")
    return Mesh(devices.reshape(-1, model_parallel), ("data", "model"))


def local_batch(step: int, global_batch: int, features: int) -> tuple[np.ndarray, np.ndarray]:
    """This process's rows of the global batch (here: synthetic regression data)."""
    per_process = global_batch // jax.process_count()
    rng = np.random.default_rng(1000 * step + jax.process_index())
    x = rng.standard_normal((per_process, features), dtype=np.float32)
    return x, np.tanh(x[:, ::-1]).copy()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--coordinator", default="localhost:1234")
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--auto", action="store_true",
                        help="let jax.distributed.initialize() detect the cluster")
    parser.add_argument("--model-parallel", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=16, help="global batch size")
    args = parser.parse_args(argv)

    initialize(args)
    mesh = global_mesh(args.model_parallel)
    features, model = 8, MLP(layers=3, depth=16)
    batch_sharding = NamedSharding(mesh, nn.logical_to_mesh_axes(("batch", "embed"), RULES))

    tx = optax.adam(1e-2)  # one instance: the state's static parts must match its sharding tree

    def make_state(rng, x):
        params = model.init(rng, x)["params"]
        return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)

    x0 = jnp.zeros((args.batch, features))
    abstract = jax.eval_shape(make_state, jax.random.PRNGKey(0), x0)
    state_sharding = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract), mesh, RULES)

    def train_step(state, x, y):
        def loss_fn(params):
            return jnp.mean((state.apply_fn({"params": params}, x) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss

    with jax.set_mesh(mesh), nn.logical_axis_rules(RULES):
        state = jax.jit(make_state, out_shardings=state_sharding)(jax.random.PRNGKey(0), x0)
        step_fn = jax.jit(train_step, in_shardings=(state_sharding, batch_sharding,
                                                    batch_sharding),
                          out_shardings=(state_sharding, NamedSharding(mesh, P())))
        for step in range(args.steps):
            x, y = local_batch(step, args.batch, features)
            gx = jax.make_array_from_process_local_data(batch_sharding, x)
            gy = jax.make_array_from_process_local_data(batch_sharding, y)
            state, loss = step_fn(state, gx, gy)
            if jax.process_index() == 0:
                print(f"step {step}: loss {float(loss):.5f}")
    w1 = state.params["ScanLogicalDotReluDot_0"]["W1"]
    if jax.process_index() == 0:
        print(f"processes: {jax.process_count()}, mesh: {dict(mesh.shape)}")
        print(f"W1 {w1.value.shape} names {w1.names} sharding {w1.value.sharding.spec}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
