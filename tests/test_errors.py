"""Tests for flaxen.errors: every class builds, names its arguments, and pickles."""

import copy
import inspect
import pickle

import pytest

from flaxen import errors

# class name -> constructor arguments; string arguments must appear in the message.
CASES = {
    "AlreadyExistsError": ("/tmp/ckpt_7",),
    "ApplyModuleInvalidMethodError": ("not_a_method_xyz",),
    "ApplyScopeInvalidVariablesStructureError": ({"params": {"params": {}}},),
    "ApplyScopeInvalidVariablesTypeError": (),
    "AssignSubModuleError": ("ConvThing",),
    "CallCompactUnboundModuleError": (),
    "CallSetupUnboundModuleError": (),
    "CallShareScopeOnUnboundModuleError": (),
    "CallUnbindOnUnboundModuleError": (),
    "CursorFindError": (),
    "DescriptorAttributeError": (),
    "FlaxError": ("custom message text",),
    "ImmutableVariableError": ("variable /params/w is immutable",),
    "IncorrectPostInitOverrideError": (),
    "InvalidCheckpointError": ("/ckpts/run1", "step_412"),
    "InvalidFilterError": ("weird_filter",),
    "InvalidInstanceModuleError": (),
    "InvalidRngError": ("missing stream 'dropout' at /Drop_0.",),
    "InvalidScopeError": ("scope_abc",),
    "JaxTransformError": (),
    "LazyInitError": ("ShapedArray_float32_8_4",),
    "MPACheckpointingRequiredError": ("/ckpts/mpa", "step_9"),
    "MPARestoreDataCorruptedError": ("step_10", "/ckpts/gda"),
    "MPARestoreTargetRequiredError": ("/ckpts/tgt", "step_11", "layer/kernel"),
    "MPARestoreTypeNotMatchError": ("step_12", "/ckpts/gda_type"),
    "ModifyScopeVariableError": ("batch_stats", "mean", "/BatchNorm_0"),
    "MultipleMethodsCompactError": (),
    "NameInUseError": ("param", "bar", "Foo"),
    "PartitioningUnspecifiedError": ("target_obj",),
    "ReservedModuleAttributeError": ("annot_parent_name",),
    "ScopeCollectionNotFound": ("state", "counter", "/Counter_0"),
    "ScopeParamNotFoundError": ("embed", "/Embed_0"),
    "ScopeParamShapeError": ("kernel", "/Dense_0", "shape_found", "shape_wanted"),
    "ScopeVariableNotFoundError": ("mean", "batch_stats", "/BN_1"),
    "SetAttributeFrozenModuleError": ("SomeModule", "num_features", "val_10"),
    "SetAttributeInModuleSetupError": (),
    "NNXError": ("model/layers/0", "the node cannot be split", "pass a Module instead"),
    "GraphStateMismatchError": ("model/w", "state has no entry for it", "restore a matching State"),
    "GraphUpdateStaticError": ("model/n_layers", "a static field changed", "keep it fixed"),
    "NotAGraphNodeError": ("args/0", "an int is not a graph node", "pass a Module"),
    "NNXFilterError": ("<filter>", "3.5 is not a filter", "use a type or a string"),
    "NNXTransformError": ("jit/args/1", "a list is not hashable", "pass a tuple"),
    "MeshRequiredError": (("model", None),),
    "CarryStructureError": ("while_loop: the carry changed; make the variable before the loop",),
    "BatchSizeError": ("pad_shard_unpad: sizes 3 and 4 differ; give them one size",),
    "MetadataAxisError": ("remove_axis(0) expected axis name 'layers', found 'zz'; pass the "
                          "same metadata_params",),
    "MissingAxisError": ("RNN: inputs of shape (3,) have no time axis; add one",),
    "NNXUnsupportedError": ("", "graph-mode with graph_updates is not supported for nnx.vjp",
                            "pass graph_updates=False"),
    "NNXArgumentError": ("vmap/in_axes", "in_axes has 3 entries for 2 args", "give one per arg"),
    "RngStreamNotFoundError": ("rngs/dropout", "no 'dropout' stream", "add it to Rngs"),
    "NNXRulesMissingError": ("", "No VJP defined for custom_vjp function f using defvjp.",
                             "call f.defvjp(fwd, bwd) first"),
    "NNXStructureChangeError": ("", "nnx.cond: the branches left the state differently",
                                "make the branches change only values"),
    "VariableInPlaceError": ("", "In-place operations are no longer supported for Variable",
                             "use v[...] += x"),
    "SowTypeError": ("model/intermediates", "the slot holds an int", "choose another name"),
    "SetAttributesNotFoundError": ("model", "no attribute 'deterministic'", "check the name"),
    "NNXInteropError": ("", "LinenWrapper: call init() first, it records the graph."),
    "InvalidNNXValueError": ("", "Cannot assign a Param as a value; assign its .value."),
    "RestoreMismatchError": ([("/w", "shape", (2,), (3,))], "ckpt/checkpoint_1"),
    "TorchConversionError": ("torch key fc.weight maps nowhere",),
    "TraceContextError": ("cannot mutate across traces",),
    "TransformTargetError": ("dense_instance",),
    "TransformedMethodReturnValueError": ("encode_method",),
    "TraverseTreeError": (len, abs),
}

# Every message must tell the user how to fix the problem; these are the classes whose
# message comes entirely from the caller, so they are exempt.
CALLER_WORDED = {"FlaxError", "ImmutableVariableError", "TraceContextError"}
FIX_WORDS = ("pass", "use", "make", "move", "give", "check", "call", "rename", "assign",
             "restore", "re-run", "return", "add", "keep", "bind", "construct",
             "transform", "do not", "choose", "save")


def test_all_lists_every_class_and_cases_cover_them():
    public = {n for n, v in vars(errors).items()
              if isinstance(v, type) and issubclass(v, BaseException)}
    assert public == set(errors.__all__)
    assert public == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_message_names_arguments_and_hierarchy(name):
    cls = getattr(errors, name)
    args = CASES[name]
    err = cls(*args)
    assert isinstance(err, errors.FlaxError)
    assert isinstance(err, Exception)
    message = str(err)
    assert message
    for arg in args:
        if isinstance(arg, str):
            assert arg in message, (name, arg, message)
    if name not in CALLER_WORDED:
        lowered = message.lower()
        assert any(w in lowered for w in FIX_WORDS), message
    with pytest.raises(errors.FlaxError, match=".") as info:
        raise err
    assert info.value is err


@pytest.mark.parametrize("name", sorted(CASES))
def test_pickle_and_copy_roundtrip(name):
    err = getattr(errors, name)(*CASES[name])
    for clone in (pickle.loads(pickle.dumps(err)), copy.deepcopy(err)):
        assert type(clone) is type(err)
        assert str(clone) == str(err)


def test_constructor_arguments_are_kept_as_attributes():
    err = errors.ScopeParamShapeError("kernel", "/params/Dense_0", (3, 4), (2, 4))
    assert (err.param_name, err.scope_path) == ("kernel", "/params/Dense_0")
    assert (err.value_shape, err.init_shape) == ((3, 4), (2, 4))
    assert "(3, 4)" in str(err) and "(2, 4)" in str(err)
    err = errors.NameInUseError("submodule", "bar", "Foo")
    assert (err.key_type, err.value, err.module_name) == ("submodule", "bar", "Foo")


def test_mpa_target_key_is_optional():
    without = errors.MPARestoreTargetRequiredError("/p", 3)
    with_key = errors.MPARestoreTargetRequiredError("/p", 3, key="a/b")
    assert "a/b" in str(with_key) and "a/b" not in str(without)
    assert inspect.signature(errors.MPARestoreTargetRequiredError).parameters[
        "key"].default is None


def test_traverse_tree_error_says_which_misuse():
    assert "are None" in str(errors.TraverseTreeError(None, None))
    assert "are given" in str(errors.TraverseTreeError(len, len))


def test_cursor_find_error_distinguishes_none_and_many():
    assert "no object" in str(errors.CursorFindError())
    many = str(errors.CursorFindError("cur_one", "cur_two"))
    assert "more than one" in many and "cur_one" in many and "cur_two" in many
