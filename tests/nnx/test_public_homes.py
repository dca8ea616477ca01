"""Every public class of ``flaxen.nnx`` names a module that ``import flaxen.nnx`` has loaded:
treescope (and anything else resolving a class through ``sys.modules``) prints
``type=List`` rather than ``<class 'flaxen.nnx.helpers.List'>`` whatever ran before."""

import subprocess
import sys

_PROBE = """
import sys
import flaxen.nnx as nnx
missing = []
for name in dir(nnx):
    obj = getattr(nnx, name) if not name.startswith('_') and name != 'VariableState' else None
    mod = getattr(obj, '__module__', None)
    if isinstance(obj, type) and isinstance(mod, str) and mod.startswith('flaxen'):
        if mod not in sys.modules:
            missing.append(f'{name}: {mod}')
print(missing)
"""


def test_public_classes_name_loaded_modules():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out.stdout
