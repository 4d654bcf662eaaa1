"""Meaning-preserving rewrites of a program across modules and imports, for the metamorphic bench
(bench/metamorphic.py): the same program with its import aliases renamed, its module aliases turned
into from-imports, as notebook cells, or split into modules (helpers, the model, the loop).

Each rewrite takes one module's text and returns the files of the rewritten program (`main.py` or
`main.ipynb` is the program run; other modules sit beside it), or None where it does not apply or
could not keep the program's meaning.
"""

from __future__ import annotations

import ast
import builtins
import json
from collections.abc import Callable

Files = dict[str, str]
BUILTINS = frozenset(dir(builtins)) | {"__name__", "__file__", "__doc__"}


# ----- names ---------------------------------------------------------------------------------

def bound_names(node: ast.AST) -> set[str]:
    """Names a statement binds in its own scope (not inside the functions or classes it defines)."""
    names: set[str] = set()
    for sub in _own_nodes(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            names.add(sub.id)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(sub.name)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            names.update(_import_binding(alias) for alias in sub.names)
        elif isinstance(sub, ast.ExceptHandler) and sub.name:
            names.add(sub.name)
    return names


def _import_binding(alias: ast.alias) -> str:
    return alias.asname or alias.name.split(".")[0]


def _own_nodes(node: ast.AST):
    """`node` and the nodes below it that run in its scope: a nested function's or class's name,
    decorators and defaults, not its body; no comprehension's or lambda's variables."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef)) and current is not node:
            stack.extend([*current.decorator_list, *current.args.defaults, *current.args.kw_defaults])
            continue
        if isinstance(current, ast.ClassDef) and current is not node:
            stack.extend([*current.decorator_list, *current.bases, *current.keywords])
            continue
        if isinstance(current, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        stack.extend(n for n in ast.iter_child_nodes(current) if n is not None)


def free_reads(node: ast.AST) -> set[str]:
    """Names `node` (a statement, function or class) reads from the scope around it: every name
    loaded anywhere below it that no scope inside it binds (a simplification that errs towards
    counting a name as read, which only makes a rewrite apply less often)."""
    loads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    local: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = sub.args
            local.update(a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs])
            local.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
            if not isinstance(sub, ast.Lambda):
                local.update(bound_names(ast.Module(body=sub.body, type_ignores=[])))
        elif isinstance(sub, ast.comprehension):
            local.update(n.id for n in ast.walk(sub.target) if isinstance(n, ast.Name))
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        # Names the definition itself reads around it: decorators, defaults, bases.
        around = [*node.decorator_list, *(node.bases + [k.value for k in node.keywords] if isinstance(node, ast.ClassDef)
                                          else [*node.args.defaults, *(d for d in node.args.kw_defaults if d)])]
        outer = {n.id for part in around for n in ast.walk(part) if isinstance(n, ast.Name)}
        return (loads - local) | outer
    return loads - local


def _fresh(name: str, taken: set[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}_{n}", n + 1
    taken.add(candidate)
    return candidate


def _all_names(tree: ast.AST) -> set[str]:
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    names |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments)
              for a in [*n.posonlyargs, *n.args, *n.kwonlyargs, n.vararg, n.kwarg] if a is not None}
    names |= {_import_binding(a) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    return names


def _binding_counts(tree: ast.Module) -> dict[str, int]:
    """How many times each name is bound anywhere in the module (assigned, defined, imported, a
    parameter, a handler's name)."""
    counts: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names = [node.id]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [_import_binding(a) for a in node.names]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names = [node.name]
        else:
            continue
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    return counts


# ----- rewrites within the module ------------------------------------------------------------

def roundtrip(text: str) -> Files | None:
    """The control: the program as `ast.unparse` writes it (comments and layout dropped), which every
    other rewrite also does."""
    return {"main.py": ast.unparse(ast.parse(text)) + "\n"}


def aliases(text: str) -> Files | None:
    """Every import binding renamed (`import tensorflow as tf` → `as tf_alias`, `from torch import nn`
    → `as nn_alias`, `import torch` → `as torch_alias`), with every use; a name bound more than once
    is left alone."""
    tree = ast.parse(text)
    counts = _binding_counts(tree)
    taken = _all_names(tree)
    renames: dict[str, str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for alias in node.names:
            if alias.name == "*" or (isinstance(node, ast.Import) and "." in alias.name and not alias.asname):
                continue  # `import a.b` binds `a` and makes `a.b` reachable: no alias says both
            name = _import_binding(alias)
            if counts.get(name, 0) != 1 or name in renames:
                continue
            renames[name] = alias.asname = _fresh(f"{name}_alias", taken)
    if not renames:
        return None
    _renamed_uses(tree, renames)
    return {"main.py": ast.unparse(tree) + "\n"}


def _renamed_uses(tree: ast.AST, renames: dict[str, str]) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in renames:
            node.id = renames[node.id]


def from_imports(text: str) -> Files | None:
    """Module imports turned into from-imports: `import a.b as x` → `from a import b as x`, and each
    use `m.attr...` of a module imported whole (`import torch`, `import tensorflow as tf`) read through
    `from torch import attr` (`torch.optim.SGD` → `optim.SGD`, `tf.GradientTape()` → `GradientTape()`)."""
    tree = ast.parse(text)
    counts = _binding_counts(tree)
    taken = _all_names(tree)
    changed = False
    body: list[ast.stmt] = []
    for statement in tree.body:
        if not isinstance(statement, ast.Import):
            body.append(statement)
            continue
        replacement: list[ast.stmt] = []
        for alias in statement.names:
            if alias.asname and "." in alias.name:
                module, _, member = alias.name.rpartition(".")
                replacement.append(ast.ImportFrom(module=module, names=[ast.alias(member, alias.asname)], level=0))
                changed = True
                continue
            name = _import_binding(alias)
            if "." in alias.name or counts.get(name, 0) != 1:
                replacement.append(ast.Import(names=[alias]))
                continue
            members = _attribute_uses(tree, name)
            if not members:
                replacement.append(ast.Import(names=[alias]))
                continue
            bindings = {}
            for member in sorted({a.attr for a in members}):
                local = member if member not in taken else _fresh(f"{name}_{member}", taken)
                taken.add(local)
                bindings[member] = local
            replacement.append(ast.ImportFrom(module=alias.name, names=[
                ast.alias(member, None if local == member else local) for member, local in bindings.items()], level=0))
            for attribute in members:
                _replace_with_name(attribute, bindings[attribute.attr])
            if _still_read(tree, name):
                replacement.insert(0, ast.Import(names=[alias]))
            changed = True
        body.extend(replacement)
    if not changed:
        return None
    tree.body = body
    return {"main.py": ast.unparse(ast.fix_missing_locations(tree)) + "\n"}


def _attribute_uses(tree: ast.AST, name: str) -> list[ast.Attribute]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == name and isinstance(node.ctx, ast.Load)]


def _replace_with_name(attribute: ast.Attribute, name: str) -> None:
    """Turn the node `m.attr` into the name `attr` in place (its parent keeps pointing at it)."""
    attribute.__class__ = ast.Name
    attribute.id = name
    del attribute.value, attribute.attr


def _still_read(tree: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(tree))


def notebook(text: str) -> Files | None:
    """The program as a notebook, one code cell per top-level statement (with the comments above it)."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    cells, start = [], 0
    for statement in tree.body:
        end = statement.end_lineno or statement.lineno
        cells.append("".join(lines[start:end]).strip("\n"))
        start = end
    if lines[start:] and "".join(lines[start:]).strip():
        cells[-1] += "\n" + "".join(lines[start:]).rstrip("\n")
    if len(cells) < 2:
        return None
    document = {
        "cells": [{"cell_type": "code", "execution_count": None, "id": f"cell{i}", "metadata": {},
                   "outputs": [], "source": cell.splitlines(keepends=True)} for i, cell in enumerate(cells)],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                     "language_info": {"name": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }
    return {"main.ipynb": json.dumps(document, indent=1) + "\n"}


# ----- rewrites across modules ---------------------------------------------------------------

def _imports_read(tree: ast.Module, names: set[str]) -> list[ast.stmt]:
    """The module's top-level import statements, each narrowed to the bindings in `names`."""
    kept = []
    for statement in tree.body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            aliases_read = [a for a in statement.names if _import_binding(a) in names]
            if aliases_read:
                copy = ast.Import(names=aliases_read) if isinstance(statement, ast.Import) else ast.ImportFrom(
                    module=statement.module, names=aliases_read, level=statement.level)
                kept.append(copy)
    return kept


def _import_names(tree: ast.Module) -> set[str]:
    return {_import_binding(a) for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom)) for a in s.names}


def _self_contained(tree: ast.Module, kinds: tuple[type, ...]) -> list[ast.stmt]:
    """The top-level definitions of `kinds` that read only imports, builtins and each other (to a
    fixed point), each bound once in the module."""
    imports = _import_names(tree)
    counts = _binding_counts(tree)
    candidates = {s.name: s for s in tree.body if isinstance(s, kinds) and counts.get(s.name) == 1}
    moved = dict(candidates)
    changed = True
    while changed:
        changed = False
        for name, definition in list(moved.items()):
            if not free_reads(definition) <= imports | BUILTINS | set(moved):
                del moved[name]
                changed = True
    return [s for s in tree.body if s in moved.values()]


def _module_text(tree: ast.Module, definitions: list[ast.stmt]) -> str:
    reads = set().union(*(free_reads(d) for d in definitions))
    module = ast.Module(body=[*_imports_read(tree, reads), *definitions], type_ignores=[])
    return ast.unparse(ast.fix_missing_locations(module)) + "\n"


def _import_from(module: str, names: list[str], relative: bool) -> ast.ImportFrom:
    return ast.ImportFrom(module=module, names=[ast.alias(n) for n in names], level=1 if relative else 0)


def _after_imports(tree: ast.Module) -> int:
    """Where a new import goes: after the module's leading docstring and imports."""
    index = 0
    for index, statement in enumerate(tree.body):
        if not isinstance(statement, (ast.Import, ast.ImportFrom)) and not (
                index == 0 and isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)):
            return index
    return len(tree.body)


def helpers_module(text: str) -> Files | None:
    """The self-contained top-level functions (reading only imports, builtins and each other) moved into
    `helpers.py` beside the program, imported by name (`from helpers import train`)."""
    tree = ast.parse(text)
    moved = _self_contained(tree, (ast.FunctionDef, ast.AsyncFunctionDef))
    if not moved:
        return None
    helpers = _module_text(tree, moved)
    position = tree.body.index(moved[0])
    tree.body = [s for s in tree.body if s not in moved]
    tree.body.insert(min(position, _after_imports(tree)), _import_from("helpers", [d.name for d in moved], False))
    return {"main.py": ast.unparse(ast.fix_missing_locations(tree)) + "\n", "helpers.py": helpers}


def model_module(text: str) -> Files | None:
    """The model moved into `models.py` of a package: the self-contained top-level classes, and each
    self-contained top-level `name = call(...)` built by a factory there (`model = build_model()`),
    imported relatively (`from .models import Net, build_model`)."""
    tree = ast.parse(text)
    classes = _self_contained(tree, (ast.ClassDef,))
    imports = _import_names(tree)
    counts = _binding_counts(tree)
    taken = _all_names(tree)
    known = imports | BUILTINS | {c.name for c in classes}
    factories: list[ast.stmt] = []
    calls: dict[int, ast.stmt] = {}
    for index, statement in enumerate(tree.body):
        if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name) and isinstance(statement.value, ast.Call)
                and counts.get(statement.targets[0].id) == 1 and free_reads(statement.value) <= known):
            target = statement.targets[0].id
            factory = _fresh(f"build_{target}", taken)
            factories.append(ast.FunctionDef(name=factory, args=_no_arguments(), body=[ast.Return(statement.value)],
                                             decorator_list=[], returns=None, type_params=[]))
            calls[index] = ast.Assign(targets=[ast.Name(target, ast.Store())],
                                      value=ast.Call(ast.Name(factory, ast.Load()), [], []))
    moved = [*classes, *factories]
    if not moved:
        return None
    models = _module_text(tree, moved)
    body = [calls.get(i, s) for i, s in enumerate(tree.body) if s not in classes]
    tree.body = body
    tree.body.insert(_after_imports(tree), _import_from("models", [d.name for d in moved], True))
    return {"__init__.py": "", "main.py": ast.unparse(ast.fix_missing_locations(tree)) + "\n", "models.py": models}


def _no_arguments() -> ast.arguments:
    return ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])


def loop_module(text: str) -> Files | None:
    """Each top-level loop moved into a function of `loop.py` in a package: the loop reads what it used
    of the program through parameters (the model, the optimizer, the data; undefined names too), the
    imports it reads are its own, and what it binds that the program uses after it is returned."""
    tree = ast.parse(text)
    imports = _import_names(tree)
    taken = _all_names(tree)
    functions: list[ast.stmt] = []
    body: list[ast.stmt] = []
    for index, statement in enumerate(tree.body):
        if not isinstance(statement, (ast.For, ast.While)) or _has_top_level_yield(statement):
            body.append(statement)
            continue
        reads = free_reads(statement)
        before = set().union(*(bound_names(s) for s in tree.body[:index]))
        # What the loop binds before it reads it (its target, a loss) is its own; the rest comes in.
        parameters = sorted(reads - imports - BUILTINS - (bound_names(statement) - before))
        later = set().union(*(free_reads(s) | bound_names(s) for s in tree.body[index + 1:]))
        returned = sorted(bound_names(statement) & later)
        name = _fresh("train_loop", taken)
        loop_body: list[ast.stmt] = [*_imports_read(tree, reads), statement]
        if returned:
            loop_body.append(ast.Return(_names_value(returned)))
        functions.append(ast.FunctionDef(
            name=name, args=ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in parameters], vararg=None,
                                          kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
            body=loop_body, decorator_list=[], returns=None, type_params=[]))
        call = ast.Call(ast.Name(name, ast.Load()), [ast.Name(p, ast.Load()) for p in parameters], [])
        body.append(ast.Assign(targets=[_names_target(returned)], value=call) if returned else ast.Expr(call))
    if not functions:
        return None
    tree.body = body
    tree.body.insert(_after_imports(tree), _import_from("loop", [f.name for f in functions], True))
    loop = ast.unparse(ast.fix_missing_locations(ast.Module(body=functions, type_ignores=[]))) + "\n"
    return {"__init__.py": "", "main.py": ast.unparse(ast.fix_missing_locations(tree)) + "\n", "loop.py": loop}


def _has_top_level_yield(statement: ast.stmt) -> bool:
    return any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await, ast.Global, ast.Nonlocal)) for n in _own_nodes(statement))


def _names_value(names: list[str]) -> ast.expr:
    return ast.Name(names[0], ast.Load()) if len(names) == 1 else ast.Tuple([ast.Name(n, ast.Load()) for n in names], ast.Load())


def _names_target(names: list[str]) -> ast.expr:
    return ast.Name(names[0], ast.Store()) if len(names) == 1 else ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())


MODULE_REWRITES: dict[str, Callable[[str], Files | None]] = {
    "roundtrip": roundtrip,
    "aliases": aliases,
    "from_imports": from_imports,
    "notebook": notebook,
    "helpers_module": helpers_module,
    "model_module": model_module,
    "loop_module": loop_module,
}
