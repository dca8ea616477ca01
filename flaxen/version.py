"""The flaxen version string: the Flax API release flaxen implements, then flaxen's own release.

``"0.12.8.1"`` reads as "Flax 0.12.8's API, flaxen release 1". The first three numbers are the
Flax version whose public surface flaxen matches, so a version gate written for Flax
(``Version(flax.__version__) >= Version("0.12")``) takes the branch it would take with that
Flax; the fourth counts flaxen's own releases of that API and restarts at 1 when the first three
move. ``pyproject.toml`` reads the package version from here.

>>> from packaging.version import Version
>>> from flaxen.version import __version__
>>> Version("0.12") <= Version(__version__) < Version("0.13")
True
"""

__version__ = "0.12.8.1"
