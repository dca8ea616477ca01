"""``flaxen.linen.module``: the Module class and its decorators and helpers (public path).

The implementation is split into private pieces (``_module``, ``_dataclass``,
``_naming``, ``_binding``, ``_interception``, ``_state``); this file only re-exports them
under Flax's import path, so ``from flaxen.linen.module import Module`` works.

>>> from flaxen.linen.module import Module, compact
>>> Module.__name__
'Module'
"""

from flaxen.core.scope import Variable
from flaxen.linen._binding import _get_unbound_fn, apply, init, init_with_output  # noqa: F401
from flaxen.linen._call_info import (  # noqa: F401 - Flax's private names, read by user code
    _CallInfo,
    _CallInfoContext,
    _tabulate_context,
)
from flaxen.linen._interception import (
    InterceptorContext,
    _derive_profiling_name,  # noqa: F401 - Flax's private name
    disable_named_call,
    enable_named_call,
    intercept_methods,
    named_call,
    override_named_call,
)
from flaxen.linen._module import (
    Module,
    _freeze_attr,  # noqa: F401 - private helpers kept under Flax's names
    _get_local_method_names,  # noqa: F401
    _get_suffix_value_pairs,  # noqa: F401
    compact,
    compact_name_scope,
    merge_param,
    nowrap,
    share_scope,
)
from flaxen.linen._module_support import (
    Args,
    CompactNameScope,
    Descriptor,
    DescriptorWrapper,
    Interceptor,
    K,
    Kwargs,
    M,
    NextGetter,
    ParentDescriptor,
    T,
    ThreadLocalStack,
    capture_call_intermediates,
    create_descriptor_wrapper,
    module_field,
    run_interceptors,
    tuple_init,
    tuple_reduce,
    wrap_descriptor_once,
    wrap_method_once,
)
from flaxen.linen._state import ModuleBase, SetupState, _Sentinel, _unspecified_parent
from flaxen.linen._state import context as _context  # noqa: F401 - Flax's private name
from flaxen.linen._transform_wrap import TestScope

__all__ = [
    "Args", "CompactNameScope", "Descriptor", "DescriptorWrapper", "Interceptor", "K",
    "Kwargs", "M", "ModuleBase", "NextGetter", "ParentDescriptor", "T", "TestScope",
    "ThreadLocalStack", "capture_call_intermediates", "create_descriptor_wrapper",
    "module_field", "run_interceptors", "tuple_init", "tuple_reduce", "wrap_descriptor_once",
    "wrap_method_once",
    "InterceptorContext",
    "Module",
    "SetupState",
    "Variable",
    "_Sentinel",
    "_unspecified_parent",
    "apply",
    "compact",
    "compact_name_scope",
    "disable_named_call",
    "enable_named_call",
    "init",
    "init_with_output",
    "intercept_methods",
    "merge_param",
    "named_call",
    "nowrap",
    "override_named_call",
    "share_scope",
]

# Names Flax's module imports for its own use; code written for Flax reaches for some of
# them from here.
from flaxen import errors, serialization, traceback_util, traverse_util  # noqa: E402, F401
from flaxen.configurations import config  # noqa: E402, F401
from flaxen.core import DenyList, FrozenDict, Scope, meta, partial_eval  # noqa: E402, F401
from flaxen.core._filters import union_filters  # noqa: E402, F401
from flaxen.core.scope import FrozenVariableDict  # noqa: E402, F401
from flaxen.ids import FlaxId, uuid  # noqa: E402, F401
from flaxen.linen import kw_only_dataclasses  # noqa: E402, F401
from flaxen.typing import PRNGKey, RNGSequences, VariableDict  # noqa: E402, F401
