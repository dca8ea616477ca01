"""The one pytest set-up of the repository (tests/ and the doctests of flaxen/).

JAX must see its environment before it is first imported anywhere: it runs on the CPU with
8 host devices, so sharding tests have a mesh to use. The differential tests in
tests/reference/ compare against the real `flax` and are not collected when it is absent.
"""

import importlib.util
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

collect_ignore: list[str] = []
if importlib.util.find_spec("flax") is None:
    collect_ignore.append("tests/reference")


# Doctests of flaxen/ that run a deprecated API for its example, as Flax's own docs do, without
# catching the DeprecationWarning it raises (pyproject.toml makes warnings errors). The warning
# is ignored in these doctests only, by its message; every other test still fails on it, and
# tests/test_deprecation_warnings.py asserts it.
_TRAVERSAL = "ignore:`flax.traverse_util.Traversal` will be deprecated:DeprecationWarning"
_SELF_ATTENTION = "ignore:SelfAttention will be deprecated soon:DeprecationWarning"
_DOCTEST_FILTERWARNINGS = {
    "flaxen.traverse_util": _TRAVERSAL,  # the module docstring
    "flaxen.traverse_util.ModelParamTraversal": _TRAVERSAL,
    "flaxen.traverse_util.Traversal.set": _TRAVERSAL,
    "flaxen.linen.attention.SelfAttention": _SELF_ATTENTION,
}


def pytest_collection_modifyitems(config, items):
    import pytest

    for item in items:
        # A doctest item is named by the object's dotted path; a test function's name has no dot.
        spec = _DOCTEST_FILTERWARNINGS.get(item.name)
        if spec is not None and type(item).__name__ == "DoctestItem":
            item.add_marker(pytest.mark.filterwarnings(spec))
