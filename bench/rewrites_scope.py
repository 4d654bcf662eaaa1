"""Scope rewrites for the metamorphic bench: the same program, its code moved into new scopes of the module.

Each rewrite takes the source of one module and returns {"main.py": new_source}, or None when it does not
apply or could not be done without changing what the program does when run:

- step_function: the body of each innermost `for` loop becomes a `train_step(...)` function that the loop
  calls, taking the loop's names and the values carried into the body, returning those read later;
- trainer_class: the program becomes a `Trainer` class: the setup (the leading statements that build and
  configure its objects: model, optimizer, loss, data) in `__init__`, the rest in `fit`, the setup's names
  `self.<name>`, the functions reading them methods;
- factory: a function reading module-level objects is made by a `make_<f>(objects)` factory, called right
  before the function's first use.

Only the stdlib: the output is `ast.unparse`d (comments are lost) and checked to compile.
"""

from __future__ import annotations

import ast
import builtins
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
DEFS = (*FUNCS, ast.ClassDef)
COMPS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
SCOPES = (*DEFS, ast.Lambda, *COMPS)
LOOPS = (ast.For, ast.AsyncFor, ast.While)
WITHS = (ast.With, ast.AsyncWith)
TRIES = tuple({ast.Try, getattr(ast, "TryStar", ast.Try)})
IMPORTS = (ast.Import, ast.ImportFrom)
DECLARATIONS = (ast.Global, ast.Nonlocal)
# Names whose meaning depends on the scope they are called in.
SCOPE_BUILTINS = {"locals", "vars", "dir", "exec", "eval", "globals", "super"}
# Decorators known to return a function (a descriptor): what they decorate can become a method.
METHOD_DECORATORS = {"tf.function", "function", "torch.no_grad", "torch.inference_mode", "torch.enable_grad",
                     "torch.compile"}


# --- Names and scopes -------------------------------------------------------------------------------------

def _params(args: ast.arguments) -> list[ast.arg]:
    return [*args.posonlyargs, *args.args, *filter(None, [args.vararg, *args.kwonlyargs, args.kwarg])]


def _outer(node: ast.AST) -> list[ast.AST]:
    """The parts of a function, lambda, class or comprehension evaluated in the enclosing scope."""
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases, *node.keywords]
    if isinstance(node, COMPS):
        return [node.generators[0].iter]
    parts = [*node.args.defaults, *filter(None, node.args.kw_defaults)]
    if isinstance(node, FUNCS):
        parts += [*node.decorator_list, *filter(None, [a.annotation for a in _params(node.args)] + [node.returns])]
    return parts


def _inner(node: ast.AST) -> list[ast.AST]:
    """The parts of a scope node evaluated in its own scope."""
    if isinstance(node, (*DEFS, ast.Lambda)):
        return node.body if isinstance(node, DEFS) else [node.body]
    parts = [p for i, g in enumerate(node.generators) for p in ([g.iter] if i else []) + [g.target, *g.ifs]]
    return parts + [getattr(node, f) for f in ("elt", "key", "value") if hasattr(node, f)]


def _own(roots: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """The nodes of roots' scope, a value before the targets it is stored to; of a nested scope, its node
    and outer parts."""
    stack = list(roots)[::-1]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, SCOPES):
            children = _outer(node)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
            children = [*filter(None, [node.value]), *_targets(node)]
        else:
            children = list(ast.iter_child_nodes(node))
        stack += children[::-1]


def _targets(node: ast.stmt | ast.expr) -> list[ast.expr]:
    return node.targets if isinstance(node, ast.Assign) else [node.target]


def _str_bindings(node: ast.AST) -> list[str]:
    """Names bound through a string field: import, def, class, `except ... as`, match patterns."""
    if isinstance(node, ast.alias):
        return [node.asname or node.name.split(".")[0]]
    name = getattr(node, "rest" if isinstance(node, ast.MatchMapping) else "name", None)
    return [name] if isinstance(name, str) else []


def _accesses(roots: Iterable[ast.AST]) -> Iterator[tuple[str, str]]:
    """(name, "load" | "store" | "del") for each read and binding in roots' scope, in about evaluation order.
    A comprehension runs on the spot: it reads its free names there (and binds its walrus targets)."""
    for node in _own(roots):
        if isinstance(node, ast.Name):
            yield node.id, type(node.ctx).__name__.lower()
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            yield node.target.id, "load"
        elif isinstance(node, COMPS):
            yield from ((n, "load") for n in _free(node))
            yield from ((w.target.id, "store") for w in ast.walk(node) if isinstance(w, ast.NamedExpr))
        yield from ((n, "store") for n in _str_bindings(node))


def _names(roots: Iterable[ast.AST], *kinds: str) -> set[str]:
    return {n for n, k in _accesses(roots) if k in kinds}


def _closures(roots: Iterable[ast.AST]) -> Counter:
    """The names that the functions, lambdas and classes in roots' scope read or write from outside."""
    return Counter(n for s in _own(roots) if isinstance(s, (*DEFS, ast.Lambda)) for n in _free(s))


def _uses(roots: Iterable[ast.AST]) -> Counter:
    """How often roots' scope names each name, and the scopes nested in it from outside themselves."""
    return Counter(n for n, _ in _accesses(roots)) + _closures(roots)


def _locals(node: ast.AST) -> set[str]:
    roots = _inner(node)
    declared = {n for s in _own(roots) if isinstance(s, DECLARATIONS) for n in s.names}
    params = {a.arg for a in _params(node.args)} if isinstance(node, (*FUNCS, ast.Lambda)) else set()
    return (params | _names(roots, "store", "del")) - declared


def _free(node: ast.AST) -> set[str]:
    """The names a function, lambda, class or comprehension reads or writes from outside itself."""
    roots = _inner(node)
    if isinstance(node, ast.ClassDef):  # a class body's names are not seen by the functions in it
        return (_names(roots, "load", "store", "del") - _locals(node)) | set(_closures(roots))
    return set(_uses(roots)) - _locals(node)


def _target_names(target: ast.AST) -> list[str]:
    return list(dict.fromkeys(n.id for n in _own([target]) if isinstance(n, ast.Name)))


def _definite(stmts: list[ast.stmt], done: Iterable[str] = ()) -> set[str]:
    """The names bound for certain once stmts have run to their end, `done` those bound before."""
    done = set(done)
    for s in stmts:
        deleted = _names([s], "del")
        if isinstance(s, ast.If):
            done = _definite(s.body, done) & _definite(s.orelse, done)
        elif isinstance(s, WITHS):
            done = _definite(s.body, done | _names(s.items, "store"))
        elif isinstance(s, TRIES):
            done = _definite(s.finalbody, done - deleted)
        elif isinstance(s, (*LOOPS, ast.Match)) or (isinstance(s, ast.AnnAssign) and not s.value):
            done -= deleted
        else:
            walrus = {w.target.id for w in ast.walk(s) if isinstance(w, ast.NamedExpr)}
            done = (done - deleted) | (_names([s], "store") - walrus)
    return done


def _fresh(base: str, taken: set[str]) -> str:
    name = next(n for n in [base, *(f"{base}_{i}" for i in range(1, len(taken) + 2))] if n not in taken)
    taken.add(name)
    return name


def _identifiers(tree: ast.AST) -> set[str]:
    return {v for n in ast.walk(tree) for v in [getattr(n, "id", None), getattr(n, "arg", None),
                                                 getattr(n, "name", None), *_str_bindings(n)] if isinstance(v, str)}


def _result(tree: ast.Module) -> dict[str, str] | None:
    text = ast.unparse(tree) + "\n"
    try:
        compile(text, "main.py", "exec")
    except SyntaxError:  # e.g. a walrus whose target became self.<name>
        return None
    return {"main.py": text}


# --- step_function ----------------------------------------------------------------------------------------

def _loops(stmts: list[ast.stmt], known: set[str], in_try: bool = False) -> Iterator[tuple[ast.For, set[str], bool]]:
    """The innermost `for` loops of stmts' scope, each with the names bound for certain when it starts, and
    whether a `try` encloses it."""
    for s in stmts:
        if isinstance(s, ast.For) and not any(isinstance(n, LOOPS) for n in _own(s.body)):
            yield s, known, in_try
        elif isinstance(s, (*LOOPS, ast.If)):
            target = _names([s.target], "store") if hasattr(s, "target") else set()
            yield from _loops(s.body, known | target, in_try)
        elif isinstance(s, WITHS):
            yield from _loops(s.body, known | _names(s.items, "store"), in_try)
        elif isinstance(s, TRIES):
            for part in (s.body, *(h.body for h in s.handlers), s.orelse, s.finalbody):
                yield from _loops(part, known, True)
        if isinstance(s, (*LOOPS, ast.If)):
            yield from _loops(s.orelse, known, in_try)
        known = _definite([s], known)


def _may_read_first(stmts: list[ast.stmt], name: str) -> bool:
    """Whether running stmts may read (or delete) `name` before they certainly bind it."""
    for s in stmts:
        if isinstance(s, ast.If):
            if name in _uses([s.test]) or _may_read_first(s.body, name) or _may_read_first(s.orelse, name):
                return True
        elif isinstance(s, WITHS):
            first = next((k for n, k in _accesses(s.items) if n == name), None)
            if first in ("load", "del") or (first is None and _may_read_first(s.body, name)):
                return True
        elif isinstance(s, (*LOOPS, *TRIES, ast.Match)):
            if name in _uses([s]):
                return True
        elif next((k for n, k in _accesses([s]) if n == name), "store") != "store":
            return True
        if name in _definite([s]):
            return False
    return False


def _fails_at_once(body: list[ast.stmt], name: str) -> bool:
    """Whether the body first accesses `name` by a read that always runs (not under `if`, `and`, `or`, a
    lambda or comprehension): bound nowhere else, the name fails the first iteration there, global or local."""
    for s in body:
        if isinstance(s, WITHS) and name not in _uses(s.items):
            if name in _uses(s.body):
                return _fails_at_once(s.body, name)
        elif name in _uses([s]):
            guarded = {id(n) for g in ast.walk(s) if isinstance(g, (ast.IfExp, ast.BoolOp, *SCOPES))
                       for n in ast.walk(g)}
            first = next((n for n in _own([s]) if getattr(n, "id", None) == name or isinstance(n, ast.AugAssign)
                          and getattr(n.target, "id", None) == name), None)
            return (isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)) and id(first) not in guarded
                    and (isinstance(first, ast.AugAssign) or isinstance(getattr(first, "ctx", None), ast.Load)))
    return False


def _step(loop: ast.For, known: set[str], in_try: bool, scope: tuple[Counter, Counter, Counter],
          taken: set[str]) -> ast.FunctionDef | None:
    """Move the loop's body into a new function that the body calls; None if that could change meaning."""
    body, own = loop.body, list(_own(loop.body))
    if (any(isinstance(n, (ast.Attribute, ast.Subscript)) for n in ast.walk(loop.target))
            or any(isinstance(n, (ast.Break, ast.Continue, ast.Return, *DECLARATIONS)) for n in own)
            or any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for s in body for n in ast.walk(s))
            or any(isinstance(n, ast.ImportFrom) and n.names[0].name == "*" for n in own)
            or set(_uses(body)) & SCOPE_BUILTINS):
        return None
    uses, binds, closures = scope
    accesses, targets = list(_accesses(body)), _target_names(loop.target)
    assigned = list(dict.fromkeys(n for n, k in accesses if k != "load"))
    outside, bound_outside = uses - _uses(body), binds - Counter(n for n, k in accesses if k != "load")
    # A function or lambda reading a name the body binds (called during the body, or made in it and
    # kept) would see the step's local, or a variable only updated when the step returns.
    if set(_closures(body)) & {*assigned, *targets} or set(closures - _closures(body)) & set(assigned):
        return None
    known, carried, definite, deleted = known | set(targets), [], _definite(body), _names(body, "del")
    for name in assigned:
        needs_in = _may_read_first(body, name)
        if not (needs_in or outside[name]):
            # Not read after the body, but the loop's scope kept its value alive till the next binding
            # (a persistent tape, a graph): returned when the body certainly binds it.
            carried += [name] if name in definite and name not in deleted else []
            continue
        if in_try or name in deleted:
            return None  # an exception, or the del, would leave it stale or unbound after the step
        # Its value from before the iteration may flow on: it must be passed in, unless it is bound
        # nowhere else and the first iteration fails on reading it anyway.
        if (needs_in or name not in definite) and name not in known and (
                bound_outside[name] or hasattr(builtins, name) or not _fails_at_once(body, name)):
            return None
        carried.append(name)
    params = ", ".join(targets + [n for n in carried if n in known and n not in targets])
    fname, results = _fresh("train_step", taken), ", ".join(carried)
    loop.body = ast.parse(f"{results} = {fname}({params})" if carried else f"{fname}({params})").body
    func = ast.parse(f"def {fname}({params}):\n    return {results}").body[0]
    func.body[:0 if carried else 1] = body
    return func


def step_function(source: str) -> dict[str, str] | None:
    """Each innermost `for` loop in module code or in a top-level function: its body becomes a function."""
    tree = ast.parse(source)
    taken, changed = _identifiers(tree), False
    for stmts, params in [(tree.body, set())] + [(f.body, {a.arg for a in _params(f.args)})
                                                 for f in tree.body if isinstance(f, FUNCS)]:
        if any(isinstance(n, DECLARATIONS) for n in _own(stmts)):
            continue
        scope = (_uses(stmts) + Counter(params),
                 Counter(n for n, k in _accesses(stmts) if k != "load") + Counter(params), _closures(stmts))
        new_body = []
        for i, s in enumerate(stmts):
            found = list(_loops([s], _definite(stmts[:i], params)))
            new_body += [f for loop, known, in_try in found if (f := _step(loop, known, in_try, scope, taken))] + [s]
        changed |= len(new_body) > len(stmts)
        stmts[:] = new_body
    return _result(tree) if changed else None


# --- trainer_class ----------------------------------------------------------------------------------------

class _Unsafe(Exception):
    """A name that must become self.<name> is bound by an import, def or `except ... as`."""


def _to_self(roots: Iterable[ast.AST], names: set[str], shadow: set[str], base: set[str]) -> None:
    """Rename the reads and writes of `names` in roots' scope, and in the nested scopes without their own
    variable of that name, to self.<name> (ast.unparse writes a Name's id as it is). `base`: the variables
    that functions nested here see (a class's own are not)."""
    for node in _own(roots):
        if isinstance(node, ast.Name) and node.id in names - shadow:
            node.id = f"self.{node.id}"
        if set(_str_bindings(node)) & (names - shadow):
            raise _Unsafe(node)
        if isinstance(node, ast.ClassDef):
            _to_self(node.body, names, shadow | _locals(node), base)
        elif isinstance(node, SCOPES):
            _to_self(_inner(node), names, base | _locals(node), base | _locals(node))


def _builds(value: ast.expr) -> bool:
    """A call (`Net().to(device)`, `tf.keras.Sequential([...])`), or a list, tuple or dict display of them."""
    if isinstance(value, (ast.List, ast.Tuple)):
        return bool(value.elts) and all(map(_builds, value.elts))
    if isinstance(value, ast.Dict):
        return bool(value.values) and None not in value.keys and all(map(_builds, value.values))
    return isinstance(value, ast.Call)


def _sets_up(stmt: ast.stmt, built: set[str]) -> bool:
    """Whether stmt builds or configures the program's objects: `name = <call>` (or `a, b = <call>`), a method
    call on a name built so far (`model.compile(...)`), a `with <...>.scope():` of such statements."""
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        return stmt.value is not None and _builds(stmt.value) and all(
            isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.expr_context))
            for t in _targets(stmt) for n in ast.walk(t))
    if isinstance(stmt, ast.Expr):
        receiver = stmt.value.func if isinstance(stmt.value, ast.Call) else None
        if not isinstance(receiver, ast.Attribute):
            return False
        while isinstance(receiver, ast.Attribute):
            receiver = receiver.value
        return isinstance(receiver, ast.Name) and receiver.id in built
    return isinstance(stmt, ast.With) and _setup_length(stmt.body, built) == len(stmt.body) and all(
        isinstance(w.context_expr, ast.Call) and isinstance(w.context_expr.func, ast.Attribute)
        and w.context_expr.func.attr == "scope" and not w.optional_vars for w in stmt.items)


def _setup_length(stmts: list[ast.stmt], built: set[str]) -> int:
    """How many of stmts, from the first, build the program's objects; `built`: the names built before."""
    built = set(built)
    for i, s in enumerate(stmts):
        if not _sets_up(s, built):
            return i
        built |= _names([s], "store")
    return len(stmts)


def trainer_class(source: str) -> dict[str, str] | None:
    """The module's program as a Trainer class: the setup in __init__, the rest in fit, the setup's names
    attributes, the functions reading them methods."""
    tree = ast.parse(source)
    body = tree.body
    # What comes before the last import stays first, before the imports' side effects: it must bind nothing.
    cut = max((i + 1 for i, s in enumerate(body) if isinstance(s, IMPORTS)),
              default=int(bool(ast.get_docstring(tree))))
    flow = [s for s in body[cut:] if not isinstance(s, DEFS)]
    setup_length = _setup_length(flow, set())
    setup, fit = flow[:setup_length], flow[setup_length:]
    staying = [s for s in body if s not in flow]
    funcs = {s.name: s for s in body if isinstance(s, FUNCS)}
    top = Counter(n for n, k in _accesses(staying) if k != "load")
    setup_names, fit_names = _names(setup, "store", "del"), _names(fit, "store", "del")
    if (not setup or any(_names([s], "store", "del") for s in body[:cut] if not isinstance(s, (*IMPORTS, *DEFS)))
            or (setup_names | fit_names) & set(top) or any(top[f] > 1 for f in funcs)
            # Read before bound: a builtin at module level, unbound as a local of fit or an attribute.
            or any(hasattr(builtins, n) and _may_read_first(setup + fit, n) for n in setup_names | fit_names)):
        return None
    # Names bound in fit that the setup or a function reads must outlive fit's call: attributes too.
    attrs = setup_names | (fit_names & set(_uses(setup + staying)))
    methods: set[str] = set()
    while new := {n for n, f in funcs.items() if _free(f) & (attrs | methods)} - methods:
        methods |= new
    moved = [s for s in body if isinstance(s, FUNCS) and s.name in methods]
    kept, ids = [s for s in staying if s not in moved], _identifiers(ast.Module([*setup, *fit, *moved], []))
    if (set(_uses(kept)) & (attrs | methods)  # a class, the prelude or a decorator would read a moved name
            or any(set(_uses(_outer(f))) & (attrs | methods | {"fit", "__init__"}) for f in moved)
            or any(ast.unparse(getattr(d, "func", d)) not in METHOD_DECORATORS
                   for f in moved for d in f.decorator_list)
            or any(isinstance(n, DECLARATIONS) for s in [*setup, *fit, *moved] for n in ast.walk(s))
            or (attrs | methods) & {"fit", "__init__"} or set(_uses([*setup, *fit, *moved])) & SCOPE_BUILTINS
            or "self" in ids or any(n.startswith("__") and not n.endswith("__") for n in ids)):  # mangled in a class
        return None
    try:
        _to_self(setup + fit, attrs | methods, set(), set())
        for f in moved:
            _to_self(f.body, attrs | methods, _locals(f), _locals(f))
            (f.args.posonlyargs or f.args.args).insert(0, ast.arg(arg="self", annotation=None))
    except _Unsafe:
        return None
    name = _fresh("Trainer", _identifiers(tree))
    new = ast.parse(f"class {name}:\n    def __init__(self): pass\n    def fit(self): pass\n"
                    f"{name}(){'.fit()' if fit else ''}\n").body
    init, fit_def = new[0].body
    init.body, fit_def.body = setup, fit
    new[0].body = [init, *([fit_def] if fit else []), *moved]
    tree.body = kept + new
    return _result(tree)


# --- factory ----------------------------------------------------------------------------------------------

def _plain(stmts: list[ast.stmt]) -> Iterator[str]:
    """The names bound by plain `name = ...` / `a, b = ...` statements, at top level or in a `with`."""
    for s in stmts:
        if isinstance(s, WITHS):
            yield from _plain(s.body)
        elif isinstance(s, (ast.Assign, ast.AnnAssign)) and s.value:
            targets = ast.Tuple(_targets(s), ast.Store())
            if all(isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.Starred, ast.expr_context))
                   for n in ast.walk(targets)):
                yield from _target_names(targets)


def factory(source: str) -> dict[str, str] | None:
    """Each top-level function reading module-level objects: made by a factory taking them, called right
    before the function's first use."""
    tree = ast.parse(source)
    body, taken = list(tree.body), _identifiers(tree)
    binds = Counter(n for n, k in _accesses(body) if k != "load")
    first_bind = {n: i for i, s in reversed(list(enumerate(body))) for n in _names([s], "store", "del")}
    defined = {n for s in body if isinstance(s, (*IMPORTS, *DEFS)) for n in _names([s], "store")}
    declared = {n for node in ast.walk(tree) if isinstance(node, DECLARATIONS) for n in node.names}
    plain = list(dict.fromkeys(_plain(body)))
    inserts: dict[int, list[ast.stmt]] = {}
    for at, f in [(i, s) for i, s in enumerate(body) if isinstance(s, FUNCS)]:
        reads = {n for n in _free(f) if binds[n] and n not in defined}  # names it reads at module level
        captured = sorted(reads, key=lambda n: plain.index(n) if n in plain else -1)
        first = next((i for i, s in enumerate(body) if s is not f and f.name in _uses([s])), len(body))
        if (not captured or binds[f.name] != 1 or any(isinstance(n, DECLARATIONS) for n in ast.walk(f))
                or any(binds[n] != 1 or n not in plain or n in declared or first_bind[n] >= first for n in captured)
                or (first < len(body) and isinstance(body[first], DEFS))
                # Its decorators and defaults now run at the factory's call: what they read must not change.
                or any(binds[n] > 1 or first_bind[n] >= at for n in _uses(_outer(f)) if binds[n])):
            continue
        maker, args = _fresh(f"make_{f.name}", taken), ", ".join(captured)
        tree.body[at] = ast.parse(f"def {maker}({args}):\n    return {f.name}").body[0]
        tree.body[at].body.insert(0, f)
        inserts.setdefault(first, []).append(ast.parse(f"{f.name} = {maker}({args})").body[0])
    if not inserts:
        return None
    tree.body = [stmt for i, s in enumerate([*tree.body, None]) for stmt in [*inserts.get(i, []), s] if stmt]
    return _result(tree)


SCOPE_REWRITES: dict[str, Callable[[str], dict[str, str] | None]] = {
    "step_function": step_function,
    "trainer_class": trainer_class,
    "factory": factory,
}
