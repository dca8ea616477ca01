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

