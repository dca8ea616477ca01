"""The flaxen version string."""

__version__ = "0.1.0"
