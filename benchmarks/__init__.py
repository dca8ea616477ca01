"""Benchmark suites: each compares flaxen with the reference `flax` and hand-written pure JAX."""
