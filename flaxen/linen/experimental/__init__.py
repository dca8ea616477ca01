"""flaxen.linen.experimental: Linen layers whose API may still change (Flax's same path).

It holds :mod:`flaxen.linen.experimental.layers_with_named_axes`, layers recording logical
axis names for their parameters through :func:`flaxen.linen.partitioning.param_with_axes`.
"""
