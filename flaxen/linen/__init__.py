"""flaxen.linen: Modules, layers and lifted transforms, with Flax Linen's public names."""
