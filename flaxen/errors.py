"""Error classes raised by flaxen, one per kind of user mistake.

Every class derives from :class:`FlaxError` and has the same name and constructor
signature as its counterpart in ``flax.errors``, so ``except flax.errors.X`` code keeps
working once ``flax`` is replaced by ``flaxen``. Each message says what went wrong, names
the offending path or value, and ends with how to fix it.

The constructor arguments stay available as attributes (``err.param_name``,
``err.scope_path``, ...) and errors survive pickling, which matters for multi-process
runners that ship exceptions between processes.

>>> from flaxen import errors
>>> err = errors.ScopeParamShapeError('kernel', '/Dense_0', (3, 4), (2, 4))
>>> isinstance(err, errors.FlaxError)
True
>>> err.scope_path
'/Dense_0'
"""

from __future__ import annotations

from typing import Any

# The module, not its classes: every exception class named here is part of the public set.
from flaxen.layer_math import errors as _layer_errors

__all__ = [
    "NNXInteropError",
    "InvalidNNXValueError",
    "NNXArgumentError",
    "SowTypeError",
    "SetAttributesNotFoundError",
    "RngStreamNotFoundError",
    "NotAGraphNodeError",
    "NNXTransformError",
    "NNXUnsupportedError",
    "MeshRequiredError",
    "BatchSizeError",
    "CarryStructureError",
    "MissingAxisError",
    "MetadataAxisError",
    "NNXRulesMissingError",
    "NNXStructureChangeError",
    "VariableInPlaceError",
    "NNXFilterError",
    "NNXError",
    "GraphUpdateStaticError",
    "GraphStateMismatchError",
    "AlreadyExistsError",
    "ApplyModuleInvalidMethodError",
    "ApplyScopeInvalidVariablesStructureError",
    "ApplyScopeInvalidVariablesTypeError",
    "AssignSubModuleError",
    "CallCompactUnboundModuleError",
    "CallSetupUnboundModuleError",
    "CallShareScopeOnUnboundModuleError",
    "CallUnbindOnUnboundModuleError",
    "CursorFindError",
    "DescriptorAttributeError",
    "FlaxError",
    "ImmutableVariableError",
    "IncorrectPostInitOverrideError",
    "InvalidCheckpointError",
    "InvalidFilterError",
    "InvalidInstanceModuleError",
    "InvalidRngError",
    "InvalidScopeError",
    "JaxTransformError",
    "LazyInitError",
    "MPACheckpointingRequiredError",
    "MPARestoreDataCorruptedError",
    "MPARestoreTargetRequiredError",
    "MPARestoreTypeNotMatchError",
    "ModifyScopeVariableError",
    "MultipleMethodsCompactError",
    "NameInUseError",
    "PartitioningUnspecifiedError",
    "ReservedModuleAttributeError",
    "RestoreMismatchError",
    "ScopeCollectionNotFound",
    "ScopeParamNotFoundError",
    "ScopeParamShapeError",
    "ScopeVariableNotFoundError",
    "SetAttributeFrozenModuleError",
    "SetAttributeInModuleSetupError",
    "TorchConversionError",
    "TraceContextError",
    "TransformTargetError",
    "TransformedMethodReturnValueError",
    "TraverseTreeError",
]


def _rebuild(cls: type, args: tuple, kwargs: dict) -> FlaxError:
    return cls(*args, **kwargs)


class FlaxError(Exception):
    """Base class of every flaxen error; ``str(err)`` is the full message.

    >>> try:
    ...     raise FlaxError('something went wrong')
    ... except FlaxError as e:
    ...     print(e)
    something went wrong
    """

    def __new__(cls, *args: Any, **kwargs: Any):
        self = super().__new__(cls, *args)
        # Remember the constructor call: the message alone cannot rebuild a subclass
        # whose __init__ takes structured arguments (needed by pickle / copy).
        self._ctor_args = (args, kwargs)  # type: ignore[attr-defined]
        return self

    def __init__(self, message: str) -> None:
        super().__init__(message)

    def __reduce__(self):
        args, kwargs = self._ctor_args
        return (_rebuild, (type(self), args, kwargs), None)


def _fmt(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


# --- Module.apply / init argument mistakes ----------------------------------------------


class ApplyModuleInvalidMethodError(FlaxError):
    """``method=`` passed to ``Module.apply`` is neither a method nor a callable."""

    def __init__(self, method: Any) -> None:
        self.method = method
        super().__init__(
            f"Cannot call apply(): method={method!r} is not a method of the Module nor a "
            "function taking the module as its first argument. Pass a method of the "
            "Module (e.g. method=MyModule.encode or method='encode') or a function "
            "fn(module, *args)."
        )


class ApplyScopeInvalidVariablesStructureError(FlaxError):
    """The variables given to ``apply`` have an extra ``'params'`` layer."""

    def __init__(self, variables: Any) -> None:
        self.variables = variables
        super().__init__(
            "Expected the variables passed to apply() to look like {'params': {...}}, "
            "but found an extra 'params' layer: {'params': {'params': ...}}. "
            "Pass variables['params'] instead (or {'params': params} where params is "
            "the inner dict)."
        )


class ApplyScopeInvalidVariablesTypeError(FlaxError):
    """The first argument to ``apply`` is not a dict of collections."""

    def __init__(self) -> None:
        super().__init__(
            "The first argument passed to an apply function must be a dict of "
            "collections, each a dict with string keys, e.g. {'params': {...}}. "
            "If you passed only the parameters, wrap them: apply({'params': params}, ...)."
        )


class InvalidInstanceModuleError(FlaxError):
    """``init``/``apply``/``bind`` was called on the Module class instead of an instance."""

    def __init__(self) -> None:
        super().__init__(
            "init, init_with_output, apply and bind must be called on an instance of a "
            "Module, not on the Module class itself. Construct it first: "
            "MyModule(...).init(rng, x) instead of MyModule.init(rng, x)."
        )


class InvalidRngError(FlaxError):
    """An RNG stream is missing or invalid (e.g. ``make_rng`` on a stream not passed in)."""

    def __init__(self, msg: str) -> None:
        self.msg = msg
        super().__init__(
            f"{msg} Pass every RNG stream the module uses to init/apply, e.g. "
            "module.init({'params': key0, 'dropout': key1}, x) or "
            "module.apply(variables, x, rngs={'dropout': key})."
        )


class LazyInitError(FlaxError):
    """``lazy_init`` produced variables that depend on an abstract input's values."""

    def __init__(self, partial_val: Any) -> None:
        self.partial_val = partial_val
        super().__init__(
            "lazy_init could not compute a variable because it depends on the value of "
            f"an abstract input (found: {_fmt(partial_val)}). Make the init function use "
            "only shapes and dtypes of jax.ShapeDtypeStruct inputs, or pass a real array."
        )


# --- Module definition mistakes ---------------------------------------------------------


class AssignSubModuleError(FlaxError):
    """A submodule was created outside ``setup`` or an ``@compact`` method."""

    def __init__(self, cls: Any) -> None:
        self.cls = cls
        super().__init__(
            f"Submodule {_fmt(cls)} must be defined in `setup()` or in a method wrapped "
            "in `@compact`, but it was created elsewhere. Move its construction into "
            "setup() (assigning it to self) or decorate the calling method with "
            "@nn.compact."
        )


class CallCompactUnboundModuleError(FlaxError):
    """A Module was called directly instead of through ``init``/``apply``."""

    def __init__(self) -> None:
        super().__init__(
            "Can't call compact methods on unbound modules: this Module has no variables. "
            "Use variables = module.init(rng, x) and then module.apply(variables, x), "
            "or bind it first with module.bind(variables)."
        )


class CallSetupUnboundModuleError(FlaxError):
    """``setup()`` was called by hand on an unbound Module."""

    def __init__(self) -> None:
        super().__init__(
            "Can't call setup() on an unbound Module; setup runs automatically when a "
            "bound Module is used. To reach a submodule defined in setup, use "
            "nn.apply(lambda m: m.submodule.clone(), module)(variables), or bind the "
            "module first: module.bind(variables).submodule."
        )


class CallShareScopeOnUnboundModuleError(FlaxError):
    """``share_scope`` was called on an unbound Module."""

    def __init__(self) -> None:
        super().__init__(
            "Can't call share_scope() on an unbound Module. Call it from setup() or a "
            "@compact method of a Module being run by init/apply."
        )


class CallUnbindOnUnboundModuleError(FlaxError):
    """``unbind()`` was called on a Module that is not bound."""

    def __init__(self) -> None:
        super().__init__(
            "Can't call unbind() on an unbound Module: there is nothing to unbind. "
            "Bind it first: module.bind(variables).unbind()."
        )


class DescriptorAttributeError(FlaxError):
    """A property of a Module accessed an attribute that does not exist."""

    def __init__(self) -> None:
        super().__init__(
            "Trying to access a property that accessed an attribute that does not "
            "exist (the AttributeError came from inside the property). Check the "
            "attribute names used in the property's body."
        )


class IncorrectPostInitOverrideError(FlaxError):
    """``__post_init__`` was overridden without calling ``super().__post_init__()``."""

    def __init__(self) -> None:
        super().__init__(
            "This Module overrides __post_init__() without calling "
            "super().__post_init__(), so it was never registered. Add "
            "super().__post_init__() to your __post_init__."
        )


class MultipleMethodsCompactError(FlaxError):
    """More than one method of a Module class is decorated with ``@compact``."""

    def __init__(self) -> None:
        super().__init__(
            "Only one method per class can be @compact. Keep @compact on one "
            "method and define the other submodules in setup(), or split the Module "
            "into two Modules that each have one @compact method."
        )


class NameInUseError(FlaxError):
    """A submodule, param or variable name is already taken in the same Module."""

    def __init__(self, key_type: str, value: str, module_name: str) -> None:
        self.key_type = key_type
        self.value = value
        self.module_name = module_name
        super().__init__(
            f'Could not create {key_type} "{value}" in Module {module_name}: Name in use. '
            "The name is already used by a submodule, param or variable (they share one "
            "namespace). Give it a different name, or to share a submodule reuse the "
            "same instance instead of creating a second one with the same name."
        )


class ReservedModuleAttributeError(FlaxError):
    """A Module declares one of the reserved fields ``parent`` or ``name``."""

    def __init__(self, annotations: Any) -> None:
        self.annotations = annotations
        super().__init__(
            "The attributes `parent` and `name` are reserved on Modules, but this "
            f"Module declares them in its fields: {_fmt(annotations)}. Rename those "
            "fields."
        )


class SetAttributeFrozenModuleError(FlaxError):
    """An attribute was assigned on a Module outside of ``setup``."""

    def __init__(self, module_cls: Any, attr_name: str, attr_val: Any) -> None:
        self.module_cls = module_cls
        self.attr_name = attr_name
        self.attr_val = attr_val
        super().__init__(
            f"Can't set {attr_name}={attr_val!r} for Module of type {_fmt(module_cls)}: "
            "Module instance is frozen outside of setup method. Assign attributes in "
            "setup(), pass the value as a constructor field, or make a modified copy "
            f"with module.clone({attr_name}=...)."
        )


class SetAttributeInModuleSetupError(FlaxError):
    """A dataclass field of a Module was reassigned inside ``setup``."""

    def __init__(self) -> None:
        super().__init__(
            "Module construction attributes (dataclass fields) are frozen and cannot be "
            "reassigned in setup(). Pass the value when constructing the Module, "
            "e.g. Foo(features=3), or store it under a different attribute name."
        )


class TransformTargetError(FlaxError):
    """A Linen transform was given something other than a Module class or function."""

    def __init__(self, target: Any) -> None:
        self.target = target
        super().__init__(
            "Linen transformations must be applied to Module classes or to functions "
            "taking a Module instance as their first argument, but got "
            f"{_fmt(target)}. Transform the class instead, e.g. nn.vmap(nn.Dense)(3), "
            "or wrap the instance: nn.vmap(lambda mdl, x: mdl(x), ...)(nn.Dense(3), x)."
        )


class TransformedMethodReturnValueError(FlaxError):
    """A transformed Module method returned a Module or a Variable."""

    def __init__(self, name: str | None) -> None:
        self.name = name
        super().__init__(
            f"Transformed Module method {name} cannot return Modules or Variables. "
            "Return arrays (e.g. variable.value) instead."
        )


class JaxTransformError(FlaxError):
    """A raw JAX transform was applied across a Flax Module boundary."""

    def __init__(self) -> None:
        super().__init__(
            "JAX transforms and Flax Modules cannot be mixed: JAX transforms need pure "
            "functions. Inside a Module, use the lifted versions (nn.jit, nn.vmap, "
            "nn.scan, nn.remat, ...) instead of jax.jit / jax.vmap / ..."
        )


class PartitioningUnspecifiedError(FlaxError):
    """A transform adds an axis to a Partitioned variable with no ``partition_name``."""

    def __init__(self, target: Any) -> None:
        self.target = target
        super().__init__(
            "Trying to add an axis to a Partitioned variable with a transformation, but "
            f"'partition_name' is not set in metadata_params: {_fmt(target)}. Pass "
            "metadata_params={nn.PARTITION_NAME: 'axis_name'} to the transform."
        )


# --- Scope / variable access mistakes ---------------------------------------------------


class InvalidScopeError(FlaxError):
    """A temporary Scope was used after its context ended."""

    def __init__(self, scope_name: str) -> None:
        self.scope_name = scope_name
        super().__init__(
            f'The scope "{scope_name}" is no longer valid: temporary scopes only live '
            "inside the context that created them. Do not keep references to a Scope "
            "(or a bound Module) after init/apply returns; use module.bind(...) for a "
            "long-lived bound Module."
        )


class ModifyScopeVariableError(FlaxError):
    """A variable in an immutable collection was written to."""

    def __init__(self, col: str, variable_name: str, scope_path: str) -> None:
        self.col = col
        self.variable_name = variable_name
        self.scope_path = scope_path
        super().__init__(
            f'Cannot update variable "{variable_name}" in "{scope_path}" because '
            f'collection "{col}" is immutable. Make it mutable: '
            f"module.apply(variables, ..., mutable=['{col}'])."
        )


class ScopeCollectionNotFound(FlaxError):
    """A variable was read from a collection that is empty / absent."""

    def __init__(self, col_name: str, var_name: str, scope_path: str) -> None:
        self.col_name = col_name
        self.var_name = var_name
        self.scope_path = scope_path
        super().__init__(
            f'Tried to access "{var_name}" from collection "{col_name}" in '
            f'"{scope_path}" but the collection is empty. Either the collection was '
            f"not passed to apply (pass {{'{col_name}': ...}} inside the variables, e.g. "
            "apply({'params': params}, ...) rather than apply(params, ...)), or it must "
            f"be initialized now: apply(..., mutable=['{col_name}'])."
        )


class ScopeParamNotFoundError(FlaxError):
    """A parameter was looked up that does not exist in the given variables."""

    def __init__(self, param_name: str, scope_path: str) -> None:
        self.param_name = param_name
        self.scope_path = scope_path
        super().__init__(
            f'Could not find parameter named "{param_name}" in scope "{scope_path}". '
            "Check that the variables passed to apply come from init of the same "
            "Module and that the parameter name matches the one used at init."
        )


class ScopeParamShapeError(FlaxError):
    """An existing parameter's shape differs from what its initializer would produce."""

    def __init__(self, param_name: str, scope_path: str, value_shape: Any,
                 init_shape: Any) -> None:
        self.param_name = param_name
        self.scope_path = scope_path
        self.value_shape = value_shape
        self.init_shape = init_shape
        super().__init__(
            f'For parameter "{param_name}" in "{scope_path}", the initializer expects '
            f"shape {init_shape}, but the existing parameter has shape {value_shape}. "
            "The inputs given to apply probably differ in shape from those used at "
            "init; re-run init with inputs of the same shape, or fix the input shape."
        )


class ScopeVariableNotFoundError(FlaxError):
    """A variable does not exist and its collection is immutable, so it can't be made."""

    def __init__(self, name: str, col: str, scope_path: str) -> None:
        self.name = name
        self.col = col
        self.scope_path = scope_path
        super().__init__(
            f'No variable named "{name}" in collection "{col}" exists in '
            f'"{scope_path}", and the collection is immutable so it cannot be created. '
            f"Pass it in the variables, or make the collection mutable: "
            f"apply(..., mutable=['{col}'])."
        )


class ImmutableVariableError(FlaxError):
    """An immutable Variable (e.g. in an immutable collection) was assigned."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class TraceContextError(FlaxError):
    """State created under one JAX trace was touched from a different trace level."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class InvalidFilterError(FlaxError):
    """A collection filter is not a bool, str, type, or container of those."""

    def __init__(self, filter_like: Any) -> None:
        self.filter_like = filter_like
        super().__init__(
            f'Invalid filter: "{_fmt(filter_like)}". A filter must be a bool, a string, '
            "a type, a callable or a container (list/tuple/set) of those."
        )


# --- NNX graph and transform mistakes ----------------------------------------------------


class NNXError(FlaxError):
    """Base of the NNX errors: ``path`` names where in the object graph, ``fix`` the way out.

    >>> err = GraphStateMismatchError('/linear/kernel', 'no value for this Param')
    >>> isinstance(err, ValueError), err.path
    (True, '/linear/kernel')
    """

    default_fix = ""

    def __init__(self, path: str, problem: str, fix: str | None = None) -> None:
        self.path = path
        self.problem = problem
        self.fix = self.default_fix if fix is None else fix
        where = f"at {path}: " if path else ""
        end = " " if problem.endswith((".", "?", ")")) and self.fix else ". " if self.fix else ""
        if not self.fix and not problem.endswith((".", "?", ")")):
            end = "."
        super().__init__(f"{where}{problem}{end}{self.fix}".rstrip())


class NNXInteropError(NNXError, ValueError):
    """A Linen<->NNX wrapper (``LinenWrapper``, ``NNXWrapper``, ``Functional``) was misused."""

    default_fix = ""  # each message says its own fix


class InvalidNNXValueError(NNXError, ValueError):
    """A value handed to an NNX object has the wrong kind or shape (a Variable assigned as
    another Variable's value, metric inputs of the wrong shape or dtype)."""

    default_fix = ""  # each message says its own fix


class GraphStateMismatchError(NNXError, ValueError):
    """A State does not fit a graph definition (a missing or an extra entry)."""

    default_fix = ("Split the graphdef and the state from the same model (or a model of the "
                   "same structure).")


class GraphUpdateStaticError(NNXError, ValueError):
    """``graph_update_static`` met two graphs it cannot reconcile."""

    default_fix = ("Update a node only from a copy of itself (e.g. one made by nnx.clone or "
                   "a transform), adding new sub-nodes that are not shared.")


class NotAGraphNodeError(NNXError, TypeError):
    """A graph operation got something that is not a graph node or a container of them."""

    default_fix = "Pass an nnx.Module, nnx.Rngs, a Variable, or a list/dict/tuple of them."


class NNXFilterError(NNXError, ValueError):
    """Filters passed to a split cannot partition the state as asked."""

    default_fix = "Add a filter for the rest, e.g. end the filters with `...`."


class NNXTransformError(NNXError, ValueError):
    """An NNX transform (jit, grad, vmap, scan, ...) got arguments it cannot lift."""

    default_fix = "See the transform's docstring for the arguments it accepts."


class NNXUnsupportedError(NNXTransformError, NotImplementedError):
    """An NNX transform was asked for a mode or an argument it does not implement (the
    graph-updates mode of ``nnx.vjp``/``nnx.jvp``, ``reduce_axes``); a
    ``NotImplementedError``, as Flax raises there.

    >>> issubclass(NNXUnsupportedError, NotImplementedError)
    True
    """

    default_fix = "See the transform's docstring for the modes and arguments it supports."


class BatchSizeError(FlaxError, ValueError, AssertionError):
    """Batched arguments have no batch size to go by, or disagree on it: those of a
    data-parallel helper (``jax_utils.pad_shard_unpad``, where Flax's ``assert`` makes it an
    ``AssertionError`` too) or the mapped inputs and variables of a lifted ``vmap`` (a
    ``ValueError`` there, as in Flax).

    >>> isinstance(BatchSizeError('sizes 3 and 4: give them one size'), AssertionError)
    True
    """


class MissingAxisError(FlaxError, _layer_errors.LayerRankError, IndexError):
    """An input has fewer dimensions than a layer needs (an RNN input without a time axis,
    attention inputs without a heads axis). Flax fails there indexing a shape
    (``IndexError``); this class is an ``IndexError`` for that, and a ``LayerRankError``
    (so a ``ValueError`` and an ``AssertionError``) like flaxen's other rank mistakes.

    >>> err = MissingAxisError('RNN: inputs of shape (3,): add a time axis')
    >>> isinstance(err, IndexError), isinstance(err, ValueError)
    (True, True)
    """


class MetadataAxisError(FlaxError, ValueError, AssertionError):
    """A lifted transform removing a metadata axis (``nn.Partitioned.remove_axis``) found
    another axis name at that position than the one it added: the transform's
    ``metadata_params`` differ between adding and removing. An ``AssertionError`` too, as
    Flax's ``assert`` raises there.

    >>> isinstance(MetadataAxisError('expected axis name layers at 0'), AssertionError)
    True
    """


class CarryStructureError(FlaxError, ValueError, TypeError):
    """The carried variables of a lifted loop (``nn.scan``'s ``variable_carry``,
    ``nn.while_loop``'s ``carry_variables``) changed structure inside the body, e.g. a
    variable was created there; a ``TypeError`` too, as JAX's loops raise for a carry whose
    type changes.

    >>> isinstance(CarryStructureError('create it before the loop'), TypeError)
    True
    """


class MeshRequiredError(FlaxError, ValueError):
    """A Variable asks to be sharded (``out_sharding`` names mesh axes) while no mesh is
    known: none is set with ``jax.set_mesh`` (or ``with mesh:``), none is in its metadata.
    Flax raises a ``ValueError`` here too, rather than leave the value silently unsharded.

    >>> str(MeshRequiredError(('model', None))).startswith('An auto mesh context')
    True
    """

    def __init__(self, out_sharding: Any) -> None:
        self.out_sharding = out_sharding
        super().__init__(
            f"An auto mesh context or metadata is required if creating a variable with "
            f"annotation out_sharding={out_sharding!r}: its value cannot be placed without "
            "a mesh. Create it under `with jax.set_mesh(mesh):`, pass `mesh=` with the "
            "metadata or a NamedSharding as out_sharding, or turn eager sharding off "
            "(`eager_sharding=False`, `nnx.use_eager_sharding(False)`) to shard it later.")

    def __reduce__(self) -> tuple:
        return (type(self), (self.out_sharding,))


class NNXRulesMissingError(NNXError, AttributeError, ValueError):
    """A custom-derivative function was called before its rules were given (``defvjp``);
    an ``AttributeError``, as JAX's own ``custom_vjp`` raises, and a ``ValueError``, as
    Flax's ``nnx.custom_vjp`` raises."""

    default_fix = "Call f.defvjp(fwd, bwd) before calling f."


class NNXStructureChangeError(NNXTransformError, TypeError):
    """The state a control-flow transform carries changed structure: the branches of
    ``nnx.cond``/``nnx.switch`` left it differently, or a loop step (``fori_loop``,
    ``while_loop``, ``scan``) added, removed or replaced an attribute or Variable. A
    ``TypeError`` too, which is what JAX (and so Flax) raises for mismatched structures.

    >>> isinstance(NNXStructureChangeError('', 'nnx.cond: branches differ'), TypeError)
    True
    """

    default_fix = "Create all state before the transform; let the body change only values."


class VariableInPlaceError(NNXError, NotImplementedError):
    """An augmented assignment (``v += x``, ``v *= x``, ...) on a Variable itself. As in
    Flax 0.12.8 these are refused: they would rebind the name to the result in plain
    Python semantics. Update the value in place with ``v[...] += x``.

    >>> isinstance(VariableInPlaceError('', 'v += 1'), NotImplementedError)
    True
    """

    default_fix = "Write `v[...] += x` to update the Variable's value in place."


class NNXArgumentError(NNXError, TypeError):
    """An NNX transform was called with too few (or the wrong kind of) arguments."""

    default_fix = "Check the call against the transform's signature."


class RngStreamNotFoundError(NNXError, AttributeError):
    """An RNG stream was asked for that the Rngs does not have, and there is no default."""

    default_fix = ("Create it with nnx.Rngs(name=seed), or give a default stream: "
                   "nnx.Rngs(seed).")


class SowTypeError(NNXError, ValueError):
    """``Module.sow`` found an attribute of the wrong kind under the name it writes."""

    default_fix = "Use another name, or the same Variable type as the earlier sow."


class SetAttributesNotFoundError(NNXError, ValueError):
    """``Module.set_attributes`` found no submodule with one of the attributes asked for."""

    default_fix = "Check the attribute names, or pass raise_if_not_found=False."


# --- Utilities ----------------------------------------------------------------------------


class CursorFindError(FlaxError):
    """``Cursor.find`` matched no object, or more than one."""

    def __init__(self, cursor: Any = None, cursor2: Any = None) -> None:
        self.cursor = cursor
        self.cursor2 = cursor2
        if cursor is not None and cursor2 is not None:
            message = (
                "More than one object found given the conditions of the cond_fn. The first "
                "two objects found have the following paths: "
                f"{_cursor_path(cursor)} and {_cursor_path(cursor2)} (Cursor.find() needs "
                "exactly one match but cond_fn matched more than one object). Make cond_fn "
                "more specific, or use Cursor.find_all() to get every match."
            )
        else:
            message = (
                "No object found given the conditions of the cond_fn. Cursor.find() needs "
                "exactly one match and cond_fn(path, value) was True for no object: check "
                "cond_fn, or use Cursor.find_all(), which may yield nothing."
            )
        super().__init__(message)


def _cursor_path(cursor: Any) -> str:
    # Cursor objects keep their access path (".x[1]['b']") privately; anything else: its repr.
    path = getattr(cursor, "_path", None)
    return path if isinstance(path, str) else repr(cursor)


class TraverseTreeError(FlaxError):
    """``traverse_util`` was given both (or neither) of ``update_fn`` and ``cond_fn``."""

    def __init__(self, update_fn: Any, cond_fn: Any) -> None:
        self.update_fn = update_fn
        self.cond_fn = cond_fn
        if update_fn is None and cond_fn is None:
            problem = (
                "Both update_fn and cond_fn are None. Exactly one of them must be None: "
                "neither is given."
            )
        else:
            problem = (
                "Both update_fn and cond_fn are not None. Exactly one of them must be not "
                "None: both are given."
            )
        super().__init__(
            f"{problem} Pass update_fn to change values, or cond_fn to find them."
        )


# --- Checkpointing ---------------------------------------------------------------------


class AlreadyExistsError(FlaxError):
    """Saving would overwrite an existing file."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(
            f'Refusing to overwrite the existing file "{path}". Pass overwrite=True to '
            "replace it, or choose another path."
        )


class InvalidCheckpointError(FlaxError):
    """A checkpoint directory already holds a checkpoint at this or a later step."""

    def __init__(self, path: str, step: Any) -> None:
        self.path = path
        self.step = step
        super().__init__(
            f'Trying to save an outdated checkpoint at step {step} in "{path}": the '
            "directory already holds a checkpoint at this or a later step. Pass "
            "overwrite=True to replace them, or save to another directory."
        )


class MPACheckpointingRequiredError(FlaxError):
    """A multiprocess array must be saved through an async checkpoint manager."""

    def __init__(self, path: str, step: Any) -> None:
        self.path = path
        self.step = step
        super().__init__(
            f'Checkpoint failed at step {step} and path "{path}": the target contains '
            "a multiprocess array, which must be saved/restored with an async "
            "checkpoint manager. Create one at top level and pass it, e.g. "
            "save_checkpoint_multiprocess(..., async_manager=manager), or use Orbax."
        )


class MPARestoreDataCorruptedError(FlaxError):
    """A saved multiprocess array has no commit marker, so its save never completed."""

    def __init__(self, step: Any, path: str) -> None:
        self.step = step
        self.path = path
        super().__init__(
            f'Restoring checkpoint step {step} failed on the multiprocess array at '
            f'"{path}": its "commit_success.txt" marker is missing, so its save was '
            "probably interrupted. Restore from an earlier step, or save again."
        )


class MPARestoreTargetRequiredError(FlaxError):
    """Restoring a multiprocess array needs a target holding a pre-created array."""

    def __init__(self, path: str, step: Any, key: Any = None) -> None:
        self.path = path
        self.step = step
        self.key = key
        where = f" (array at {key})" if key is not None else ""
        super().__init__(
            f'Restoring checkpoint step {step} from "{path}" failed{where}: '
            "checkpoints containing multiprocess arrays must be restored into a target "
            "that holds pre-created arrays with their shardings at the same tree "
            "position. Pass such a target, or allow_partial_mpa_restoration=True."
        )


class MPARestoreTypeNotMatchError(FlaxError):
    """The saved multiprocess array type does not match the current configuration."""

    def __init__(self, step: Any, gda_path: str) -> None:
        self.step = step
        self.gda_path = gda_path
        super().__init__(
            f'Restoring checkpoint step {step} failed at "{gda_path}": the saved '
            "multiprocess array type does not match the array type in use. Restore "
            "into jax.Array targets (the only kind current JAX supports)."
        )


# --- Weight import (flaxen.interop) ----------------------------------------------------


class TorchConversionError(FlaxError):
    """Imported (torch / safetensors) weights do not fit the flaxen target; lists every problem.

    >>> err = TorchConversionError(["torch key 'fc.weight' (3, 4) maps nowhere"])
    >>> err.problems
    ["torch key 'fc.weight' (3, 4) maps nowhere"]
    """

    def __init__(self, problems: Any) -> None:
        if isinstance(problems, str):
            problems = [problems]
        self.problems = list(problems)
        listing = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            f"The imported weights do not fit the flaxen target ({len(self.problems)} "
            f"problem{'s' if len(self.problems) != 1 else ''}):\n{listing}\n"
            "Check that the flaxen model has the same layers and sizes as the torch one, "
            "or pass rules={torch_key_or_module: target_path | None | fn} to map, drop or "
            "transform what the automatic matching gets wrong."
        )


class RestoreMismatchError(FlaxError, ValueError):
    """A ``strict=True`` restore found saved data unlike the target; lists every difference.

    ``mismatches`` holds ``(path, kind, expected, found)`` entries (see
    :func:`flaxen._tree_compare.tree_mismatches`); ``source`` names the file, if any.

    >>> err = RestoreMismatchError([('/w', 'shape', (2,), (3,))], 'ckpt/checkpoint_1')
    >>> str(err).splitlines()[1]
    '  /w: shape (2,) in the target, (3,) restored'
    """

    def __init__(self, mismatches: Any, source: str | None = None) -> None:
        self.mismatches = list(mismatches)
        self.source = source
        lines = []
        for path, kind, expected, found in self.mismatches:
            if kind == "shape" or kind == "dtype":
                lines.append(f"  {path}: {kind} {_fmt(expected)} in the target, "
                             f"{_fmt(found)} restored")
            else:
                lines.append(f"  {path}: {_fmt(expected)} in the target, {_fmt(found)} restored")
        origin = f' restored from "{source}"' if source else " restored"
        n = len(self.mismatches)
        super().__init__(
            f"The data{origin} does not match the target at {n} path{'s' if n != 1 else ''}:\n"
            + "\n".join(lines)
            + "\nBuild the target like the saved model (same layer sizes, dtypes and "
            "structure), or restore with strict=False (the default) to take the saved values "
            "as they are."
        )
