"""flaxen.experimental: the path Flax 0.8.3 published NNX under (``experimental.nnx``)."""
