"""Straight-line code generated per graph definition for ``split`` and ``merge``.

Why: interpreting a definition tuple on every call costs a Python call, a kind dispatch and
several tuple reads per object, which is most of a split+merge round trip. A definition is
fixed, so once it has been used twice we compile one function for it that does nothing but
the object creation: no dispatch, no recursion, constants bound as closure cells.

The generated code never decides anything the interpreter in :mod:`flaxen.nnx._graph_engine`
would decide differently. The merge function only accepts a State with exactly the keys
the definition expects and leaves of exactly the expected types (the definition's Variable
classes, or one snapshot class of :mod:`flaxen.nnx._snapshots`); for anything else it
returns :data:`MISS` and the caller takes the general path, which raises the usual errors.
"""

from __future__ import annotations

import collections
import itertools
import operator
import sys
import types
import typing as tp
from collections.abc import Mapping

from flaxen.nnx import _trace
from flaxen.nnx._graph_node import GraphNode
from flaxen.nnx._graphdef import (
    ArrayLeaf,
    NodeDef,
    NodeRef,
    PytreeType,
    Static,
    VariableDef,
    count_defs,
    var_def_paths,
)
from flaxen.nnx.statelib import State, remember_leaves
from flaxen.nnx.variablelib import Variable

MISS = object()
# Beyond this many objects the generated source gets large enough that compiling it costs
# more than it could save.
_MAX_OBJECTS = 20_000
_LITERAL_TYPES = (str, int, bool, type(None))


class _Source:
    """Collects lines and closure constants of one generated function."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[int, str] = {}
        self.values: dict[str, tp.Any] = {}
        self.n = 0

    def const(self, value: tp.Any) -> str:
        if type(value) in _LITERAL_TYPES:
            return repr(value)
        name = self.consts.get(id(value))
        if name is None:
            name = f"k{len(self.consts)}"
            self.consts[id(value)] = name
            self.values[name] = value
        return name

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def compile(self, name: str, args: str, env: dict[str, tp.Any]) -> tp.Callable:
        env = {**env, **self.values}
        params = ", ".join(env)
        body = "\n".join("        " + ln for ln in self.lines)
        src = (f"def _factory({params}):\n    def {name}({args}):\n{body}\n"
               f"    return {name}\n")
        ns: dict[str, tp.Any] = {}
        exec(compile(src, f"<flaxen.nnx generated {name}>", "exec"), ns)  # noqa: S102
        return ns["_factory"](**env)


def _var_paths(defs: tuple) -> list[tuple[tuple, VariableDef]] | None:
    """``(path, var def)`` of each Variable in walk order, or None for graphs too large."""
    if count_defs(defs) > _MAX_OBJECTS:
        return None
    out = var_def_paths(defs)
    if any(d.type is ArrayLeaf for _, d in out):
        return None  # bare arrays: the interpreter handles them
    return out


def _trie(paths: tp.Iterable[tuple]) -> dict | None:
    """Nested dicts (insertion order = first occurrence) whose leaves are Variable indices."""
    root: dict = {}
    for i, path in enumerate(paths):
        if not path:
            return None
        node = root
        for k in path[:-1]:
            nxt = node.setdefault(k, {})
            if type(nxt) is not dict:
                return None
            node = nxt
        if path[-1] in node:
            return None
        node[path[-1]] = i
    return root


def _dict_setter(typ: type) -> tp.Any:
    # the most basic class's ``__dict__`` descriptor (GraphNode's for every graph node): the
    # same setter for all classes lets generated code set every node's dict in one loop
    for klass in reversed(typ.__mro__):
        desc = klass.__dict__.get("__dict__")
        if desc is not None:
            return desc.__set__ if type(desc) is types.GetSetDescriptorType else None
    return None


_COMMON_ENV = {
    "_new": object.__new__,
    "_dict": dict,
    "_len": len,
    "_type": type,
    "_tuple": tuple,
    "_map": map,
    "_S": State,
    "_MISS": MISS,
    "_current_trace": _trace.current_trace,
    "_TOP": _trace.TOP,
    "_set_meta": Variable._var_metadata.__set__,  # type: ignore[attr-defined]
    "_set_trace": Variable._trace_state.__set__,  # type: ignore[attr-defined]
    "_set_raw": Variable.raw_value.__set__,  # type: ignore[attr-defined]
    # a State's storage: a slot or an instance attribute, object.__setattr__ sets either
    "_osa": object.__setattr__,
    "_list": list,
    "_repeat": itertools.repeat,
    "_call": operator.call,
    "_dcopy": dict.copy,
    "_remember": remember_leaves,
    # runs an iterator of side effects to its end in C, keeping nothing
    "_drain": collections.deque(maxlen=0).extend,
}


def plain_variable_type(t: type) -> bool:
    """A Variable class whose value and metadata live in Variable's own slots (no hijax),
    which generated code may write directly."""
    return (getattr(t, "_hijax_var_type", None) is None
            and t.raw_value is Variable.raw_value  # type: ignore[attr-defined]
            and t._var_metadata is Variable._var_metadata)  # type: ignore[attr-defined]


def make_states_fn(defs: tuple, variables: bool = False, snapshot: type | None = None
                   ) -> tp.Callable[[list], State] | None:
    """``fn(variables) -> State`` equal to what the interpreter's split builds, or None.

    The State holds the Variables themselves (``variables``), snapshots of class
    ``snapshot``, or else new copies of the Variables."""
    vp = _var_paths(defs)
    if vp is None:
        return None
    if not variables and snapshot is None and not all(plain_variable_type(d.type) for _, d in vp):
        return None
    trie = _trie(p for p, _ in vp)
    if trie is None and vp:
        return None
    src = _Source()
    ln = src.lines
    n = len(vp)
    if n:
        ln.append(", ".join(f"v{i}" for i in range(n)) + ", = vs")
    if not variables and snapshot is None:
        ln.append("tr = _current_trace()")
    for i, (_, d) in enumerate(vp):
        if variables:  # today's States hold the Variables themselves
            ln.append(f"a{i} = v{i}")
        elif snapshot is not None:
            ln.append(f"a{i} = {src.const(snapshot._from_parts)}({src.const(d.type)}, "  # type: ignore[attr-defined]
                      f"v{i}.raw_value, v{i}._var_metadata)")
        else:
            ln.append(f"a{i} = _new({src.const(d.type)}); "
                      f"_set_meta(a{i}, _dict(v{i}._var_metadata)); "
                      f"_set_trace(a{i}, tr); _set_raw(a{i}, v{i}.raw_value)")

    root = _emit_nest(src, trie or {})
    if variables:  # the leaves in this definition's order, for a merge of this same State
        ln.append(f"_remember({root}, {src.const(defs)}, _tuple(vs))")
    ln.append(f"return {root}")
    return src.compile("states_from_vars", "vs", _COMMON_ENV)


def make_nest_fn(paths: tp.Sequence[tuple]) -> tp.Callable[[tp.Sequence], State] | None:
    """``fn(leaves) -> State`` nesting ``leaves[i]`` at ``paths[i]`` (the leaves themselves,
    no copies), or None when the paths do not form a tree of names (an empty path, or a
    path that is also the prefix of another)."""
    if len(paths) > _MAX_OBJECTS:
        return None
    trie = _trie(paths)
    if trie is None:
        return None
    src = _Source()
    ln = src.lines
    if paths:
        ln.append(", ".join(f"a{i}" for i in range(len(paths))) + ", = vs")

    ln.append(f"return {_emit_nest(src, trie)}")
    return src.compile("nest_leaves", "vs", _COMMON_ENV)


def _emit_nest(src: _Source, trie: dict) -> str:
    """Lines building one State over ``trie`` from the leaves ``a0``, ``a1``...: the levels
    below the top are plain dict literals (a State stores its nested levels as dicts)."""
    def literal(node: dict) -> str:
        return "{" + ", ".join(f"{src.const(k)}: " + (f"a{sub}" if type(sub) is int
                                                      else literal(sub))
                               for k, sub in node.items()) + "}"

    name = src.fresh("s")
    src.lines.append(f"{name} = _new(_S); _osa({name}, '_mapping', {literal(trie)})")
    return name


def _emit_type_guard(src: _Source, names: tp.Sequence[str], types: tp.Sequence[type]) -> None:
    """Lines returning :data:`MISS` unless each variable in ``names`` is exactly of its type.
    Chained ``type(x) is not T`` tests: about half the cost of comparing a tuple of
    ``map(type, ...)`` against a constant one (the exactness matters: an indexable Variable
    or another Mapping must not pass for a level)."""
    for start in range(0, len(names), 64):  # a line per 64 tests keeps the source readable
        tests = " or ".join(f"_type({n}) is not {src.const(t)}"
                            for n, t in zip(names[start:start + 64], types[start:start + 64]))
        src.lines.append(f"if {tests}: return _MISS")


def make_lookup_fn(paths: tp.Sequence[tuple]) -> tp.Callable[[tp.Any], tp.Any] | None:
    """``fn(state) -> [leaf, ...]`` reading ``paths`` (in that order) out of one State that
    holds exactly those paths and nothing else, or :data:`MISS` for any other argument (a
    missing or extra key, a plain dict, a non-dict level in the way), or None when the paths do
    not form a tree of names."""
    if len(paths) > _MAX_OBJECTS:
        return None
    trie = _trie(paths)
    if trie is None:
        return None
    src = _Source()
    _emit_lookup(src, trie, {}, len(paths))
    src.lines.append(f"return [{', '.join(f'l{i}' for i in range(len(paths)))}]")
    return src.compile("lookup_leaves", "s", _LOOKUP_ENV)


def _emit_lookup(src: _Source, trie: dict, leaf_types: tp.Mapping[int, type], n: int) -> None:
    """Lines reading the leaves of ``trie`` out of the State ``s`` into ``l0``, ``l1``...
    (returning :data:`MISS` on any mismatch). Leaf ``i`` in ``leaf_types`` must be of
    exactly that type; any other leaf must not be a mapping (a deeper structure than the
    definition's: the general path reports it)."""
    ln = src.lines
    ln.append("if _type(s) is not _S: return _MISS")
    ln.append("try:")
    ln.append("    m0 = s._mapping")
    nested: list[str] = []

    def lookup(node: dict, m: str) -> None:
        ln.append(f"    if _len({m}) != {len(node)}: return _MISS")
        for k, sub in node.items():
            if type(sub) is int:
                ln.append(f"    l{sub} = {m}[{src.const(k)}]")
            else:
                child = src.fresh("m")
                ln.append(f"    {child} = {m}[{src.const(k)}]")
                nested.append(child)
                lookup(sub, child)

    lookup(trie, "m0")
    ln.append("except Exception:")
    ln.append("    return _MISS")
    # every nested level (a Variable or other object that can be indexed must not pass for
    # one) and every typed leaf, exactly
    names = nested + [f"l{i}" for i in sorted(leaf_types)]
    want = [dict] * len(nested) + [leaf_types[i] for i in sorted(leaf_types)]
    _emit_type_guard(src, names, want)
    rest = [f"l{i}" for i in range(n) if i not in leaf_types]
    if rest:
        ln.append(f"for t in _set(_map(_type, ({', '.join(rest)},))):")
        ln.append("    if _is_mapping_type(t): return _MISS")


def _is_mapping_type(t: type) -> bool:
    return issubclass(t, Mapping) and not issubclass(t, Variable)


_LOOKUP_ENV = {**_COMMON_ENV, "_set": set, "_is_mapping_type": _is_mapping_type}


def make_merge_fn(defs: tuple, variables: bool = False, snapshot: type | None = None
                  ) -> tp.Callable[[State], tp.Any] | None:
    """``fn(state) -> node`` (or :data:`MISS`) equal to the interpreter's merge, or None.

    The State's leaves are used as the Variables (``variables``), or new Variables are built
    from them: from snapshots of class ``snapshot``, or else from Variables."""
    if len(defs) != 1 or type(defs[0]) is not NodeDef:
        return None
    vp = _var_paths(defs)
    if vp is None:
        return None
    trie = _trie(p for p, _ in vp)
    if trie is None:
        return None
    src = _Source()
    ln = src.lines
    # Every lookup first, in one try block (a missing key or a non-State in the way ends
    # it), then the exact type of every level and leaf (_emit_type_guard).
    ln.append("try:")
    ln.append("    m0 = s._mapping")
    checked: list[str] = []
    expected: list[type] = []

    def lookup(node: dict, m: str) -> None:
        ln.append(f"    if _len({m}) != {len(node)}: return _MISS")
        for k, sub in node.items():
            if type(sub) is int:
                ln.append(f"    l{sub} = {m}[{src.const(k)}]")
                checked.append(f"l{sub}")
                expected.append(snapshot or vp[sub][1].type)
            else:
                child = src.fresh("m")
                ln.append(f"    {child} = {m}[{src.const(k)}]")
                checked.append(child)
                expected.append(dict)
                lookup(sub, child)

    lookup(trie, "m0")
    ln.append("except Exception:")
    ln.append("    return _MISS")
    _emit_type_guard(src, checked, expected)
    build_from = len(ln)
    ln.append("tr = _current_trace()")
    body: list[str] = []
    alias: dict[int, str] = {}  # a Variable's node index -> the leaf that is it
    # Graph nodes are created, given their trace, status and (template) ``__dict__`` all at
    # once by C-level ``map`` loops over constant tuples, before any attribute is filled in:
    # per object that is a few C calls instead of a few lines of bytecode each.
    nodes: list[tuple[str, type, tp.Any, dict, tp.Any]] = []  # name, type, status, dict, set
    counter = [0]
    ok = [True]

    def build(d: tp.Any) -> str:
        t = type(d)
        if t is Static:
            return src.const(d.get())
        if t is NodeRef:
            return alias.get(d.index, f"o{d.index}")
        if t is VariableDef:
            i = counter[0]
            counter[0] = i + 1
            o = f"o{d.index}"
            if variables:
                alias[d.index] = f"l{i}"
                return f"l{i}"
            value = "value" if snapshot is not None else "raw_value"
            body.append(f"{o} = _new({src.const(d.type)}); "
                        f"_set_meta({o}, _dict(l{i}._var_metadata)); "
                        f"_set_trace({o}, tr); _set_raw({o}, l{i}.{value})")
            return o
        if d.type is not PytreeType:
            setter = _dict_setter(d.type)
            if setter is None:
                ok[0] = False
                return "None"
            o = f"o{d.index}"
            str_keys = d.type._graph_int_keys
            # interned: the generated stores' constant keys are then the template's own
            # objects, and a dict store that matches by identity skips the string compare
            keys = [sys.intern(str(k)) if str_keys else k for k, _ in d.attributes]
            # the template keeps the attribute order; data slots are filled in below
            template = {k: (sub.get() if type(sub) is Static else None)
                        for k, (_, sub) in zip(keys, d.attributes)}
            dn = "d" + o
            nodes.append((o, d.type, d.metadata, template, setter))
            for k, (_, sub) in zip(keys, d.attributes):
                if type(sub) is not Static:
                    e = build(sub)
                    body.append(f"{dn}[{src.const(k)}] = {e}")
            return o
        subs = [build(s) for _, s in d.attributes]
        t_ = src.fresh("t")
        body.append(f"{t_} = {src.const(d.metadata)}.unflatten([{', '.join(subs)}])")
        return t_

    root = build(defs[0])
    if not ok[0]:
        return None
    # upward: Pytree subclasses get their own generated code; pytreelib sits above
    from flaxen.nnx.pytreelib import Pytree, lazy_bookkeeping, record_merge_status

    if nodes:
        names = ", ".join(n for n, *_ in nodes)

        def subset(chosen: list[str]) -> str:
            return "os_" if len(chosen) == len(nodes) else f"({', '.join(chosen)},)"

        ln.append(f"os_ = _list(_map(_new, {src.const(tuple(t for _, t, *_ in nodes))}))")
        ln.append(f"{names}, = os_")
        # Pytree bookkeeping slots are left unset where Pytree.__getattr__ answers the same
        # value (see pytreelib.lazy_bookkeeping): the trace outside transforms, the class's
        # recorded merge status
        lazy = {n for n, t, *_ in nodes if lazy_bookkeeping(t)}
        eager = [n for n, *_ in nodes if n not in lazy or _trace.TOP is None]
        if eager:
            ln.append(f"_drain(_map(_set_node_trace, {subset(eager)}, _repeat(tr)))")
        if len(eager) < len(nodes):
            rest = [n for n, *_ in nodes if n not in eager]
            ln.append(f"if tr is not _TOP: "
                      f"_drain(_map(_set_node_trace, {subset(rest)}, _repeat(tr)))")
        with_status = [(n, st) for n, t, st, _, _ in nodes if st is not None
                       and not (n in lazy and record_merge_status(t, st))]
        if with_status:
            ln.append(f"_drain(_map(_set_status, {subset([n for n, _ in with_status])}, "
                      f"{src.const(tuple(st for _, st in with_status))}))")
        ln.append(f"ds_ = _list(_map(_dcopy, {src.const(tuple(t for *_, t, _ in nodes))}))")
        if len({id(getattr(x, "__self__", x)) for *_, x in nodes}) == 1:
            ln.append(f"_drain(_map({src.const(nodes[0][4])}, os_, ds_))")
        else:
            ln.append(f"_drain(_map(_call, {src.const(tuple(x for *_, x in nodes))}, os_, ds_))")
        ln.append(f"{', '.join('d' + n for n, *_ in nodes)}, = ds_")
    ln.extend(body)
    ln.append(f"return {root}")
    env = dict(_COMMON_ENV)
    env["_set_node_trace"] = GraphNode._nnx_trace.__set__  # type: ignore[attr-defined]
    env["_set_status"] = Pytree._pytree__status.__set__  # type: ignore[attr-defined]
    fn = src.compile("merge_state", "s", env)
    # the same build from the leaves themselves (statelib.remembered_leaves): no lookup
    n = len(vp)
    src.lines = ([", ".join(f"l{i}" for i in range(n)) + ", = vs"] if n else []) \
        + ln[build_from:]
    fn.build = src.compile("merge_leaves", "vs", env)  # type: ignore[attr-defined]
    return fn


# -- tree mode -----------------------------------------------------------------------------

def make_tree_build_fn(treedef: tp.Any, path_index: tp.Sequence[tuple[tuple, int]]
                       ) -> tp.Callable[[tp.Sequence], tp.Any] | None:
    """``fn(leaves) -> tree`` equal to ``treedef.unflatten`` of ``leaves`` reordered by
    ``path_index`` (leaf ``i`` goes to treedef position ``path_index[i][1]``), or :data:`MISS`
    for a wrong number of leaves; None for trees too large to be worth it.

    Why: JAX's unflatten calls back into Python once per custom node, and an NNX model is
    mostly custom nodes (each Module, List, Rngs...). The generated code builds the objects
    directly: ``nnx.Pytree`` nodes as their unflatten does (new object, trace, status,
    ``__dict__``: data attributes, then static ones), dicts, lists, tuples and None inline;
    any other node through its own subtree's unflatten.
    """
    if treedef.num_nodes > _MAX_OBJECTS:
        return None
    n = len(path_index)
    src = _Source()
    ln = src.lines
    ln.append(f"if _len(vs) != {n}: return _MISS")
    if n:
        ln.append(", ".join(f"l{i}" for i in range(n)) + ", = vs")
    ln.append(f"return {_emit_tree_build(src, treedef, path_index)}")
    return src.compile("build_tree", "vs", _tree_env())


def make_tree_merge_fn(treedef: tp.Any, path_index: tp.Sequence[tuple[tuple, int]],
                       leaf_types: tp.Mapping[int, type]
                       ) -> tp.Callable[[tp.Any], tp.Any] | None:
    """``fn(state) -> tree`` for one State holding exactly the paths of ``path_index``
    (leaf ``i`` of exactly the type ``leaf_types[i]`` where given): the lookup of
    :func:`make_lookup_fn` and the build of :func:`make_tree_build_fn` in one function;
    :data:`MISS` for anything else. None where either would be None."""
    if treedef.num_nodes > _MAX_OBJECTS or len(path_index) > _MAX_OBJECTS:
        return None
    trie = _trie([p for p, _ in path_index])
    if trie is None or not path_index:
        return None
    src = _Source()
    _emit_lookup(src, trie, leaf_types, len(path_index))
    src.lines.append(f"return {_emit_tree_build(src, treedef, path_index)}")
    return src.compile("merge_tree", "s", {**_LOOKUP_ENV, **_tree_env()})


def _tree_env() -> dict[str, tp.Any]:
    # upward: Pytree nodes are built inline; pytreelib sits above this file
    from flaxen.nnx.pytreelib import Pytree

    env = dict(_COMMON_ENV)
    env["_set_node_trace"] = GraphNode._nnx_trace.__set__  # type: ignore[attr-defined]
    env["_set_status"] = Pytree._pytree__status.__set__  # type: ignore[attr-defined]
    return env


def _emit_tree_build(src: _Source, treedef: tp.Any, path_index: tp.Sequence[tuple[tuple, int]]
                     ) -> str:
    """Lines building the tree of ``treedef`` from ``l0``, ``l1``... (leaves in path order);
    returns the root's expression."""
    # upward: Pytree nodes are built inline; pytreelib sits above this file
    from flaxen.nnx.pytreelib import Pytree, lazy_bookkeeping, record_merge_status

    base_unflatten = Pytree.__dict__["_pytree__unflatten"].__func__
    slot = [0] * len(path_index)  # treedef position -> name of the leaf in path order
    for i, (_, pos) in enumerate(path_index):
        slot[pos] = i
    ln = src.lines
    ln.append("tr = _current_trace()")
    counter = [0]
    deferred: list[str] = []

    def build(td: tp.Any) -> str:
        data = td.node_data()
        if data is None:  # a leaf
            j = counter[0]
            counter[0] = j + 1
            return f"l{slot[j]}"
        typ, aux = data
        kids = td.children()
        if typ is type(None):
            return "None"
        if typ is tuple:
            return "(" + "".join(f"{build(c)}, " for c in kids) + ")"
        if typ is list:
            return "[" + ", ".join(build(c) for c in kids) + "]"
        if typ is dict:
            parts = [f"{src.const(k)}: {build(c)}" for k, c in zip(aux, kids)]
            return "{" + ", ".join(parts) + "}"
        setter = _dict_setter(typ) if isinstance(typ, type) and issubclass(typ, Pytree) \
            else None
        unflatten = getattr(typ, "_pytree__unflatten", None)
        if setter is None or getattr(unflatten, "__func__", None) is not base_unflatten:
            # another kind of node: its own subtree's unflatten, on its leaves
            start = counter[0]
            counter[0] = start + td.num_leaves
            leaves = ", ".join(f"l{slot[j]}" for j in range(start, counter[0]))
            return f"{src.const(td)}.unflatten([{leaves}])"
        data_keys, static_keys, static_values, status = aux
        str_keys = typ._graph_int_keys
        names = [sys.intern(str(k)) if str_keys else k for k in data_keys]  # see make_merge_fn
        exprs = [build(c) for c in kids]
        o = src.fresh("o")
        line = f"{o} = _new({src.const(typ)})"
        # bookkeeping slots left unset where Pytree.__getattr__ answers the same value (see
        # make_merge_fn); the trace is written at the end, as no other code sees the object
        # before the function returns
        lazy = lazy_bookkeeping(typ)
        if lazy and _trace.TOP is not None:
            deferred.append(o)
        else:
            line += f"; _set_node_trace({o}, tr)"
        if not (lazy and record_merge_status(typ, status)):
            line += f"; _set_status({o}, {src.const(status)})"
        ln.append(line)
        if len(static_keys) >= 2:
            # a copy of a template (data keys first, then the static values), then the data
            # assigned: cheaper than a dict display that unpacks the static values
            template = dict.fromkeys(names)
            template.update((str(k) if str_keys else k, v)
                            for k, v in zip(static_keys, static_values))
            dn = src.fresh("d")
            ln.append(f"{dn} = {src.const(template)}.copy()")
            ln.extend(f"{dn}[{src.const(k)}] = {e}" for k, e in zip(names, exprs))
            ln.append(f"{src.const(setter)}({o}, {dn})")
            return o
        items = [f"{src.const(k)}: {e}" for k, e in zip(names, exprs)]
        items += [f"{src.const(str(k) if str_keys else k)}: {src.const(v)}"
                  for k, v in zip(static_keys, static_values)]
        ln.append(f"{src.const(setter)}({o}, {{{', '.join(items)}}})")
        return o

    root = build(treedef)
    if deferred:
        ln.append(f"if tr is not _TOP: "
                  f"_drain(_map(_set_node_trace, ({', '.join(deferred)},), _repeat(tr)))")
    return root
