"""Placeholder for today's ``flax.nnx.transforms.general`` (split_inputs / merge_inputs).

Helper H3 owns this module; it exists so that ``from flaxen.nnx.transforms import general``
imports.
"""
