"""NNX training helpers: ``Optimizer`` (Optax on a model's Params) and ``metrics``."""
