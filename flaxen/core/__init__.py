"""flaxen.core: the functional core (Scope, init/apply, lift) and FrozenDict."""
