"""flaxen.training: TrainState, checkpoints and other training utilities."""
