"""Package-level contracts: no dependency on `flax`, lazy submodules, version."""

import ast
import pathlib

import flaxen

PKG = pathlib.Path(flaxen.__file__).parent


def _imported_roots(path: pathlib.Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


def test_flaxen_never_imports_flax():
    offenders = [
        f"{p.relative_to(PKG.parent)}:{line}"
        for p in sorted(PKG.rglob("*.py"))
        for line, root in _imported_roots(p)
        if root == "flax"
    ]
    assert not offenders, f"flaxen/ must not import the reference `flax`: {offenders}"


def test_import_checker_sees_flax_imports(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom flax import linen\nimport flax.core\n")
    roots = [root for _, root in _imported_roots(bad)]
    assert roots.count("flax") == 2


def test_version_is_exposed():
    assert flaxen.__version__.count(".") >= 2


def test_version_gates_written_for_flax_0_12_take_the_0_12_branch():
    from packaging.version import Version

    from flaxen import version

    v = Version(flaxen.__version__)
    assert flaxen.__version__ == version.__version__
    # the Flax API flaxen implements comes first: gates like Flax 0.12.8's hold
    assert Version("0.12") <= v < Version("0.13")
    assert v >= Version("0.12.8") and v < Version("0.12.9")
    assert v.release[:3] == (0, 12, 8)
    # flaxen's own release number is the fourth part
    assert len(v.release) == 4 and v.release[3] >= 1


def test_unknown_attribute_raises():
    try:
        flaxen.definitely_not_a_submodule  # noqa: B018
    except AttributeError as e:
        assert "definitely_not_a_submodule" in str(e)
    else:
        raise AssertionError("expected AttributeError")


def test_importing_flaxen_does_not_start_the_jax_backend():
    # jax.distributed.initialize() and device-count flags must be allowed after the import
    import subprocess
    import sys

    code = (
        "import importlib\n"
        "from jax._src import xla_bridge\n"
        "for m in ['flaxen', 'flaxen.linen', 'flaxen.core', 'flaxen.training.train_state',\n"
        "          'flaxen.training.checkpoints', 'flaxen.nnx', 'flaxen.experimental.nnx',\n"
        "          'flaxen.interop', 'flaxen.serialization', 'flaxen.jax_utils']:\n"
        "    importlib.import_module(m)\n"
        "    assert not xla_bridge._backends, f'{m} started the JAX backend'\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_names_flax_modules_import_for_their_own_use_are_reachable_from_the_same_paths():
    # `from flax.x import y` for such names appears in user code now and then
    import importlib

    wanted = {
        "flaxen.io": ["Enum", "glob_module", "importlib", "NotFoundError", "logging"],
        "flaxen.jax_utils": ["core", "lax", "lu", "pe", "warnings"],
        "flaxen.traceback_util": ["jax_traceback_util", "source_info_util"],
        "flaxen.traverse_util": ["flax", "struct", "warnings", "PathParts", "VariableDict"],
        "flaxen.typing": ["Optional", "Union", "jtu", "partial", "FrozenDict"],
        "flaxen.training.common_utils": ["lax"],
        "flaxen.training.lr_schedule": ["np", "logging"],
        "flaxen.training.train_state": ["core"],
        "flaxen.configurations": ["contextmanager", "overload", "NoReturn", "TYPE_CHECKING"],
        "flaxen.cursor": ["Mapping", "Protocol", "runtime_checkable", "TraverseTreeError"],
        "flaxen.linen.fp8_ops": ["module", "custom_vjp", "custom_jvp", "np", "random"],
    }
    for mod_name, names in wanted.items():
        mod = importlib.import_module(mod_name)
        missing = [n for n in names if not hasattr(mod, n)]
        assert not missing, f"{mod_name} lacks {missing}"
    from flaxen.training import dynamic_scale

    assert dynamic_scale.Array == flaxen.typing.Array
