"""Other modules of the linted project: a name imported from them, resolved with astroid on demand.

A rule whose question reaches a call of an imported helper (`from .losses import compute_loss`,
`from . import models; models.build_model()`, `from mypkg.models import build_model`) asks
`ctx.project.function_of(call.func)`; the answer is the helper's astroid function node and its
module, or None where the name is not a function of the project (a library, a missing module, a
module that does not parse, a class, a name bound at run time). Questions about that function:
`numpy_into_return` (LL101), `returned_calls` (LL401), `wraps_tf_function` (project decorators
such as tf_agents' `common.function`).

The project is what lies under the linted file's root: walking up from the file while the
directory holds an `__init__.py`, the first directory that does not (for a top-level script, its
own directory). Only the modules a rule asks about are read, each parsed once per process and
re-read when its content changes. Every module consulted (and every candidate file looked for
and not found) is recorded in `consulted` with its content digest, so that the result cache can
tell when a finding that depends on another module must be recomputed.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.names import canonical
from lintloop.analysis.nodes import dotted
from lintloop.digests import ABSENT, content_digest
from lintloop.line_pattern import LinePattern

# How many re-exports (`from .losses import compute_loss` in a package's `__init__.py`) a name
# is followed through, and how many helper-of-helper calls a question follows.
MAX_HOPS = 4
# A module larger than this is not read for a cross-module question (generated code, data).
MAX_MODULE_BYTES = 2 * 1024 * 1024

if TYPE_CHECKING:
    from astroid import nodes
else:
    nodes: Any = None  # `astroid.nodes`, imported with the first module read: most runs never need astroid
# A relative import statement, at any indentation (one line, or parenthesized over several).
_RELATIVE_IMPORT = LinePattern(r"[ \t]*from[ \t]+\.+[\w.]*[ \t]+import\b(?:[ \t]*\([^)]*\)|[^\n]*)")


@dataclass(frozen=True)
class LintedFile:
    """Where the linted text lives on disk (absolute path), and the text itself."""

    path: str
    text: str


@dataclass
class ProjectModule:
    path: str
    name: str  # dotted module name under the project root
    tree: nodes.Module
    imports: dict[str, str]  # local name -> qualified name (relative imports resolved)

    def qualname(self, expr: nodes.NodeNG) -> str | None:
        """Canonical qualified name of an imported thing in this module (`np.mean` -> `numpy.mean`)."""
        parts: list[str] = []
        while isinstance(expr, nodes.Attribute):
            parts.append(expr.attrname)
            expr = expr.expr
        if not isinstance(expr, nodes.Name) or expr.name not in self.imports:
            return None
        return canonical(".".join([self.imports[expr.name], *reversed(parts)]))


@dataclass(frozen=True)
class ProjectFunction:
    """A function defined at the top level of another module of the project."""

    node: nodes.FunctionDef
    module: ProjectModule

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def where(self) -> str:
        """`losses.py:12`, for messages."""
        return f"{os.path.basename(self.module.path)}:{self.node.lineno}"

    @property
    def parameters(self) -> list[str]:
        """Positional parameter names in order, then keyword-only ones."""
        arguments = self.node.args
        return [a.name for a in (arguments.posonlyargs or []) + (arguments.args or []) + (arguments.kwonlyargs or [])]


# One parse per module per process (each worker keeps its own): path -> (content digest, module).
_MODULES: dict[str, tuple[str, ProjectModule | None]] = {}


def project_root(path: str) -> tuple[str, list[str]]:
    """The project root of a file and the file's dotted module name parts under it."""
    directory, filename = os.path.split(os.path.abspath(path))
    parts = [] if filename == "__init__.py" else [os.path.splitext(filename)[0]]
    while os.path.isfile(os.path.join(directory, "__init__.py")):
        directory, package = os.path.split(directory)
        parts.insert(0, package)
        if not package:
            break
    return directory, parts


def in_project(root: str, qualified: str) -> bool:
    """Whether a dotted name starts with a package or module of the project at `root`."""
    head = qualified.split(".")[0]
    return bool(head) and (os.path.isdir(os.path.join(root, head)) or os.path.isfile(os.path.join(root, head + ".py")))


def module_files(root: str, parts: list[str]) -> list[tuple[str, list[str]]]:
    """The files that may hold the module `parts` names under `root`, each with its package's parts:
    `a/b.py`, then `a/b/__init__.py`; none where there is no package directory to hold them (`common.py`
    has no submodules: nothing to read or record)."""
    base = os.path.join(root, *parts)
    if not os.path.isdir(os.path.dirname(base)):
        return []
    return [(base + ".py", parts[:-1]), (os.path.join(base, "__init__.py"), parts)]


def imports_of(tree: ast.Module | nodes.Module, package: list[str]) -> dict[str, str]:
    """Local name -> qualified name, for every import in the module; relative ones resolved against
    `package` (the importing module's package parts); those reaching above the root are left out."""
    table: dict[str, str] = {}
    is_astroid = not isinstance(tree, ast.Module)
    found = tree.nodes_of_class((nodes.Import, nodes.ImportFrom)) if is_astroid else (
        n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))
    for node in found:
        if type(node).__name__ == "Import":  # `ast.Import` or astroid's `Import`
            for name, asname in (node.names if is_astroid else [(a.name, a.asname) for a in node.names]):
                table[asname or name.split(".")[0]] = name if asname else name.split(".")[0]
            continue
        level = node.level or 0
        module = node.modname if is_astroid else (node.module or "")
        aliases = node.names if is_astroid else [(a.name, a.asname) for a in node.names]
        if level:
            if level - 1 > len(package):
                continue
            base = package[:len(package) - (level - 1)]
            module = ".".join(base + ([module] if module else []))
        if not module:
            continue
        for name, asname in aliases:
            if name != "*":
                table[asname or name] = f"{module}.{name}"
    return table


# The files a project declares its requirements in, by the names pip, setuptools and conda read; looked
# for in the project's root and the folders above it, up to this many.
REQUIREMENT_FILES = ("requirements.txt", "pyproject.toml", "setup.py", "setup.cfg", "environment.yml",
                     "environment.yaml", "settings.ini")  # settings.ini: nbdev's, which its setup.py reads
REQUIREMENT_FOLDERS_UP = 4
# A torch requirement: `torch==1.7.0`, `torch>=1.6,<1.9`, `"torch~=2.3.0"`, conda's `pytorch=1.8.1`.
_TORCH_REQUIREMENT = re.compile(
    r"(?<![\w.-])(?:py)?torch(?![\w.-])\s*((?:(?:===?|~=|<=?|>=?|!=|=)\s*[0-9][0-9a-zA-Z.*+!]*\s*,?\s*)+)")
# Modules torch removed, with the release that removed them: code importing one runs on an older torch.
_REMOVED_TORCH_MODULES = {"torch._six": (2, 0)}
# The module an import statement names first (`import torch._six`, `from torch._six import inf`).
_IMPORT_STATEMENT = LinePattern(r"[ \t]*(?:from|import)[ \t]+([\w.]+)")
_CLAUSE = re.compile(r"(===?|~=|<=?|>=?|!=|=)\s*([0-9][0-9a-zA-Z.*+!]*)")


def allowed_below(specifier: str) -> tuple[int, ...] | None:
    """A version every release a requirement's specifier allows lies below (`==1.7.0`: just above
    1.7.0; `<1.10`: 1.10; `~=2.3.0`: 2.4; `==1.8.*` and conda's `=1.8`: 1.9), or None where it allows
    any later release (`>=1.7`)."""
    bounds = []
    for operator, version in _CLAUSE.findall(specifier):
        numbers = tuple(int(n) for n in re.findall(r"\d+", version.split("+")[0].removesuffix(".*")))
        if not numbers:
            continue
        if operator == "=" or operator == "==" and version.endswith(".*"):  # a prefix (conda's `=` is one)
            bounds.append((*numbers[:-1], numbers[-1] + 1))
        elif operator in ("==", "===", "<="):
            bounds.append((*numbers, 1))  # just above the version itself
        elif operator == "<":
            bounds.append(numbers)
        elif operator == "~=" and len(numbers) >= 2:
            bounds.append((*numbers[:-2], numbers[-2] + 1))
    return min(bounds) if bounds else None


class Project(Analysis):
    """Cross-module questions for one linted file; nothing is read until a rule asks."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.file: LintedFile | None = ctx.file
        self.consulted: dict[str, str] = {}  # path -> content digest (`ABSENT`): what the findings depend on
        self._own_imports: dict[str, str] | None = None
        self._wrappers: dict[str, bool] = {}  # dotted name -> `wraps_tf_function`: a file decorates with a few, often
        if self.file is not None:
            self.root, parts = project_root(self.file.path)
            is_package = os.path.basename(self.file.path) == "__init__.py"
            self.package = parts if is_package else parts[:-1]

    # ----- the API ------------------------------------------------------------------------------
    def torch_pinned_below(self, version: tuple[int, ...]) -> bool:
        """Does the project run only on torch below `version`: declared (`torch==1.7.0` in its
        requirements.txt, `pytorch=1.8` in its environment.yml, in a requirements file of its root or a
        folder above), or shown by its code (`from torch._six import inf`, in the file or a project module
        it imports: torch 2.0 removed it)? An API deprecated in `version` is then the current one of the
        torch it runs on."""
        return any(ceiling is not None and ceiling <= version
                   for ceiling in (self._declared_torch_ceiling, self._imported_torch_ceiling))

    @computed
    def _imported_torch_ceiling(self) -> tuple[int, ...] | None:
        """The release that removed a torch module the linted file, or a project module it imports, imports."""
        if self.file is None:
            return None
        # The file's imports: its whole-file table (`from torch import _six`) and its import statements' modules,
        # read from its text (`import torch._six`, which the table holds as `torch`; the parsed tree may hold
        # only the screened code).
        imported = {*self._imports.values(), *(m.group(1) for m in _IMPORT_STATEMENT.finditer(self.file.text))}
        # Only a module that names one is parsed (by its last name: `from torch import _six` spells it so).
        mentions = tuple(module.rsplit(".", 1)[-1].encode() for module in _REMOVED_TORCH_MODULES)
        for qualified in [q for q in self._imports.values() if in_project(self.root, q)]:
            found = self._longest_module(qualified.split("."), mentions)
            if found is not None:
                imported |= {name for node in found[0].tree.nodes_of_class((nodes.Import, nodes.ImportFrom))
                             for name in ([n for n, _ in node.names] if isinstance(node, nodes.Import)
                                          else [node.modname, *(f"{node.modname}.{n}" for n, _ in node.names)])}
        return min((ceiling for removed, ceiling in _REMOVED_TORCH_MODULES.items()
                    if any(name == removed or name.startswith(removed + ".") for name in imported)), default=None)

    @computed
    def _declared_torch_ceiling(self) -> tuple[int, ...] | None:
        """The lowest version below which some requirements file holds torch (`allowed_below`), or None.
        Each file looked for is recorded (`consulted`): the answer changes with them."""
        if self.file is None:
            return None
        ceilings = []
        directory = self.root
        for _ in range(REQUIREMENT_FOLDERS_UP + 1):
            for name in REQUIREMENT_FILES:
                path = os.path.join(directory, name)
                data = _read(path)
                self.consulted[path] = ABSENT if data is None else content_digest(data)
                if data is not None:
                    text = data[:MAX_MODULE_BYTES].decode("utf-8", "replace")
                    ceilings.extend(allowed_below(m.group(1)) for m in _TORCH_REQUIREMENT.finditer(text))
            parent = os.path.dirname(directory)
            if parent == directory:
                break
            directory = parent
        return min((c for c in ceilings if c is not None), default=None)

    def function_of(self, expr: cst.BaseExpression) -> ProjectFunction | None:
        """The project function that `expr` (a call's `func` in the linted file) names through an
        import — `compute_loss`, `losses.compute_loss`, `pkg.models.build_model` — or None."""
        if self.file is None:
            return None
        path = dotted(expr)
        if not path:
            return None
        head, _, rest = path.partition(".")
        if head in self.ctx.names.bound_names and head not in self._imports:
            return None  # `compute_loss = ...` in this file: not (only) the import
        imported = self._imports.get(head)
        if imported is None:
            return None
        with self.timer.stage("analysis:Project.resolve"):
            found = self._resolve(f"{imported}.{rest}" if rest else imported, MAX_HOPS)
        return found if isinstance(found, ProjectFunction) else None

    def call_target(self, call: nodes.Call, module: ProjectModule) -> ProjectFunction | None:
        """The project function a call inside another project module runs (same module or imported)."""
        func = call.func
        if isinstance(func, nodes.Name):
            local = module.tree.locals.get(func.name, [])
            defined = [n for n in local if isinstance(n, nodes.FunctionDef)]
            if defined:
                return ProjectFunction(defined[-1], module)
        qualified = module.qualname(func) if isinstance(func, (nodes.Name, nodes.Attribute)) else None
        found = self._resolve(qualified, MAX_HOPS) if qualified else None
        return found if isinstance(found, ProjectFunction) else None

    def returned_calls(self, function: ProjectFunction, hops: int = 2) -> list[tuple[str, nodes.Call, ProjectFunction]]:
        """(qualified callee, call, function holding it) for each call whose result `function` returns
        (`return keras.Sequential(...)`, or `model = keras.Model(...); ...; return model`), through up
        to `hops` project helpers it returns the result of."""
        found = []
        for call in _returned_calls(function.node):
            qualified = function.module.qualname(call.func)
            if qualified is not None and not in_project(self.root, qualified):
                found.append((qualified, call, function))
            elif hops > 0:
                inner = self.call_target(call, function.module)
                if inner is not None and inner.node is not function.node:
                    found.extend(self.returned_calls(inner, hops - 1))
        return found

    def numpy_into_return(self, function: ProjectFunction, tensor_parameters: set[str],
                          hops: int = 2) -> tuple[nodes.Call, ProjectFunction] | None:
        """A conversion to NumPy/Python (`.numpy()`, a `numpy` function, `float()`/`int()`/`bool()`,
        `tf.make_ndarray`) of a value computed from `tensor_parameters`, whose result flows into a
        value `function` returns; also through up to `hops` project helpers it calls with them.
        Shapes and lengths (`x.shape[0]`, `len(x)`, `tf.shape(x)`) are not tensors' values."""
        node, module = function.node, function.module
        assigned = _assignments(node)
        tainted = _tainted_names(tensor_parameters, assigned)
        for call in _flowing_calls(_return_values(node), assigned):
            converted = _converted_args(call, module)
            if converted is not None and any(_reads(arg, tainted) and not _shape_only(arg, module)
                                             for arg in converted):
                inner = [c for c in call.nodes_of_class(nodes.Call) if c is not call
                         and _converted_args(c, module) is not None and _reads(c, tainted)]
                return (inner[-1] if inner else call), function  # where the tensor leaves TensorFlow
            if hops > 0 and converted is None:
                inner = self.call_target(call, module)
                if inner is not None and inner.node is not node:
                    passed = _tensor_parameters_of(call, inner, tainted)
                    if passed:
                        found = self.numpy_into_return(inner, passed, hops - 1)
                        if found is not None:
                            return found
        return None

    def wraps_tf_function(self, expr: cst.BaseExpression) -> bool:
        """`expr` names a project function that returns `tf.function(...)` of its arguments (a
        decorator such as tf_agents' `common.function`), or a project module's alias of
        `tf.function` (`function = tf.function`)."""
        name = dotted(expr) if self.file is not None else None
        if not name:
            return False
        wraps = self._wrappers.get(name)
        if wraps is None:
            wraps = self._wrappers[name] = self._wraps_tf_function(name)
        return wraps

    def _wraps_tf_function(self, name: str) -> bool:
        head, _, rest = name.partition(".")
        imported = self._imports.get(head)
        if imported is None:
            return False
        # Only modules that import TensorFlow and spell `.function` can wrap `tf.function`: the others
        # are never parsed for this question (decorators are everywhere; astroid parses are the cost).
        found = self._resolve(f"{imported}.{rest}" if rest else imported, MAX_HOPS,
                              must_mention=(b"tensorflow", b".function"))
        if isinstance(found, str):
            return found == "tensorflow.function"
        if not isinstance(found, ProjectFunction):
            return False
        return any(module_qualname == "tensorflow.function"
                   for module_qualname, _, _ in self.returned_calls(found, hops=1))

    # ----- resolution ----------------------------------------------------------------------------
    @property
    def _imports(self) -> dict[str, str]:
        """The linted file's imports: the shared name table, plus its relative imports (which that
        table leaves out), parsed from the `from . import` statements alone."""
        if self._own_imports is None:
            self._own_imports = dict(self.ctx.names.imports)
            statements = [m.group(0).strip() for m in _RELATIVE_IMPORT.finditer(self.file.text)]
            try:
                tree = ast.parse("\n".join(statements))
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                tree = ast.Module(body=[], type_ignores=[])  # a continuation line we cannot cut out: left unresolved
            self._own_imports.update(imports_of(tree, self.package))
        return self._own_imports

    def _resolve(self, qualified: str, hops: int, must_mention: tuple[bytes, ...] = ()
                 ) -> ProjectFunction | ProjectModule | str | None:
        """What a qualified name is in the project: a function, a module, or (for a name a project
        module imports from a library) that library name; None where it cannot be known.
        `must_mention`: only modules whose source holds all these bytes are parsed (the others: None)."""
        if hops < 0 or not in_project(self.root, qualified):
            return qualified if hops < MAX_HOPS else None  # a library name reached through a re-export
        found = self._longest_module(qualified.split("."), must_mention)
        if found is None:
            return None
        module, rest = found
        return self._member(module, rest, hops, must_mention) if rest else module

    def _longest_module(self, parts: list[str], must_mention: tuple[bytes, ...] = ()
                        ) -> tuple[ProjectModule, list[str]] | None:
        """The project module the longest prefix of `parts` names, and the rest (`utils.clip`: `utils`
        and `["clip"]`)."""
        for split in range(len(parts), 0, -1):
            module = self._module(parts[:split], must_mention)
            if module is not None:
                return module, parts[split:]
        return None

    def _member(self, module: ProjectModule, rest: list[str], hops: int, must_mention: tuple[bytes, ...]
                ) -> ProjectFunction | ProjectModule | str | None:
        name = rest[0]
        for node in reversed(module.tree.locals.get(name, [])):
            if isinstance(node, nodes.FunctionDef) and node.parent is module.tree and len(rest) == 1:
                return ProjectFunction(node, module)
            if isinstance(node, nodes.AssignName) and isinstance(node.parent, nodes.Assign) and len(rest) == 1:
                value = node.parent.value  # `function = tf.function`
                qualified = module.qualname(value) if isinstance(value, (nodes.Name, nodes.Attribute)) else None
                return self._resolve(qualified, hops - 1, must_mention) if qualified else None
            if isinstance(node, (nodes.Import, nodes.ImportFrom)) and name in module.imports:
                return self._resolve(".".join([module.imports[name], *rest[1:]]), hops - 1, must_mention)
            break
        return None

    def _module(self, parts: list[str], must_mention: tuple[bytes, ...] = ()) -> ProjectModule | None:
        """The module `parts` names under the root (`a/b.py` or `a/b/__init__.py`), read on demand."""
        for path, package in module_files(self.root, parts):
            module = self._load(path, package, ".".join(parts), must_mention)
            if module is not None:
                return module
        return None

    def _load(self, path: str, package: list[str], name: str, must_mention: tuple[bytes, ...] = ()
              ) -> ProjectModule | None:
        try:
            with open(path, "rb") as stream:
                data = stream.read(MAX_MODULE_BYTES + 1)
        except OSError:
            self.consulted[path] = ABSENT
            return None
        digest = content_digest(data)
        self.consulted[path] = digest  # recorded even when not parsed: an edit may add what it lacked
        if not all(text in data for text in must_mention):
            return None
        cached = _MODULES.get(path)
        if cached is not None and cached[0] == digest:
            return cached[1]
        module = None
        if len(data) <= MAX_MODULE_BYTES:
            with self.timer.stage("analysis:Project.parse"):
                module = _parse(path, data, package, name)
        _MODULES[path] = (digest, module)
        return module


def _parse(path: str, data: bytes, package: list[str], name: str) -> ProjectModule | None:
    """The module's astroid tree, or None when it cannot be decoded or parsed (never an error)."""
    global nodes
    import astroid
    from astroid import nodes as astroid_nodes
    from astroid.manager import AstroidManager

    nodes = astroid_nodes
    brain = AstroidManager.brain
    denied = brain["module_denylist"]
    brain["module_denylist"] = _EVERY_MODULE
    try:
        text = data.decode("utf-8-sig")
        tree = astroid.parse(text, apply_transforms=False)
    except Exception:  # noqa: BLE001 - astroid raises its own errors for bad input; a module we cannot read is not ours to judge
        return None
    finally:
        brain["module_denylist"] = denied
        AstroidManager().astroid_cache.pop("", None)  # astroid caches an unnamed module under "": keep ours only
    return ProjectModule(path, name, tree, imports_of(tree, package))


class _EveryModule(frozenset):
    """astroid's `module_denylist` while it parses a project module: it imports none. Building a tree
    resolves `torch.backends.cudnn.benchmark = True` by importing torch, whose package (with an
    installed framework) astroid then builds: seconds and tens of MiB for nothing lintloop asks; it
    reads the project's modules itself (`Project._module`)."""

    def __contains__(self, name: object) -> bool:
        return True


_EVERY_MODULE = _EveryModule()


# ----- questions on one astroid function -----------------------------------------------------------

def _own_nodes(function: nodes.FunctionDef, kind: type | tuple[type, ...]) -> Iterator[nodes.NodeNG]:
    """Nodes of `kind` in the function's body, not in nested functions, lambdas or classes."""
    stack = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, kind):
            yield node
        if not isinstance(node, (nodes.FunctionDef, nodes.Lambda, nodes.ClassDef)):
            stack.extend(node.get_children())


def _assignments(function: nodes.FunctionDef) -> dict[str, list[nodes.NodeNG]]:
    """Local name -> the values assigned to it anywhere in the function (order ignored: a helper is short)."""
    table: dict[str, list[nodes.NodeNG]] = {}
    for node in _own_nodes(function, (nodes.Assign, nodes.AugAssign, nodes.AnnAssign, nodes.For)):
        targets = node.targets if isinstance(node, nodes.Assign) else [node.target]
        value = node.iter if isinstance(node, nodes.For) else node.value
        if value is None:
            continue
        for target in targets:
            for name in target.nodes_of_class(nodes.AssignName):
                table.setdefault(name.name, []).append(value)  # `x += v`: x's earlier values are listed too
    return table


def _tainted_names(sources: set[str], assigned: dict[str, list[nodes.NodeNG]]) -> set[str]:
    """The names whose value is computed from `sources` (transitively through assignments)."""
    tainted = set(sources)
    changed = True
    while changed:
        changed = False
        for name, values in assigned.items():
            if name not in tainted and any(_reads(v, tainted) for v in values):
                tainted.add(name)
                changed = True
    return tainted


def _reads(expr: nodes.NodeNG, names: set[str]) -> bool:
    return (isinstance(expr, nodes.Name) and expr.name in names) or any(
        n.name in names for n in expr.nodes_of_class(nodes.Name))


def _return_values(function: nodes.FunctionDef) -> list[nodes.NodeNG]:
    return [r.value for r in _own_nodes(function, nodes.Return) if r.value is not None]


def _flowing_calls(values: list[nodes.NodeNG], assigned: dict[str, list[nodes.NodeNG]]) -> list[nodes.Call]:
    """Calls whose result can reach one of `values` through the function's assignments."""
    calls: list[nodes.Call] = []
    seen_names: set[str] = set()
    work = list(values)
    while work:
        value = work.pop()
        calls.extend(c for c in ([value] if isinstance(value, nodes.Call) else []) + list(value.nodes_of_class(nodes.Call))
                     if c not in calls)
        for name in value.nodes_of_class(nodes.Name):
            if name.name not in seen_names:
                seen_names.add(name.name)
                work.extend(assigned.get(name.name, []))
    return calls


def _returned_calls(function: nodes.FunctionDef) -> list[nodes.Call]:
    """Calls whose result is returned as is: `return f(...)`, or `x = f(...)` ... `return x`."""
    assigned = _assignments(function)
    found = []
    for value in _return_values(function):
        if isinstance(value, nodes.Call):
            found.append(value)
        elif isinstance(value, nodes.Name):
            found.extend(v for v in assigned.get(value.name, []) if isinstance(v, nodes.Call))
    return found


_BUILTIN_CONVERSIONS = ("float", "int", "bool")
_SHAPE_QUERIES = {"tensorflow.shape", "tensorflow.size", "tensorflow.rank", "keras.ops.shape"}


def _converted_args(call: nodes.Call, module: ProjectModule) -> list[nodes.NodeNG] | None:
    """The values a conversion call takes out of TensorFlow; None if it is no conversion."""
    func = call.func
    qualified = module.qualname(func)
    if isinstance(func, nodes.Attribute) and func.attrname == "numpy" and not call.args and qualified is None:
        return [func.expr]
    if qualified == "tensorflow.make_ndarray":
        return call.args[:1]
    if qualified is not None and qualified.split(".")[0] == "numpy":
        return list(call.args)
    if (isinstance(func, nodes.Name) and func.name in _BUILTIN_CONVERSIONS
            and func.name not in module.tree.locals and func.name not in module.imports):
        return list(call.args)
    return None


def _shape_only(expr: nodes.NodeNG, module: ProjectModule) -> bool:
    """A shape, size, length or dtype: `tf.shape(x)[0]`, `x.shape[1]`, `len(x)`, `x.dtype`."""
    while isinstance(expr, (nodes.Subscript, nodes.Attribute)):
        if isinstance(expr, nodes.Attribute) and expr.attrname in ("shape", "ndim", "dtype"):
            return True
        expr = expr.value if isinstance(expr, nodes.Subscript) else expr.expr
    if isinstance(expr, nodes.Call):
        if isinstance(expr.func, nodes.Name) and expr.func.name == "len":
            return True
        return module.qualname(expr.func) in _SHAPE_QUERIES
    return False


def _tensor_parameters_of(call: nodes.Call, callee: ProjectFunction, tainted: set[str]) -> set[str]:
    """The callee's parameters that receive a tainted value at `call`."""
    parameters = callee.parameters
    passed = {parameters[i] for i, arg in enumerate(call.args) if i < len(parameters) and _reads(arg, tainted)}
    passed |= {kw.arg for kw in call.keywords or [] if kw.arg in parameters and _reads(kw.value, tainted)}
    return passed


def _read(path: str) -> bytes | None:
    """A requirements file's bytes (read once: digested for the cache and searched); None where absent
    or unreadable."""
    try:
        with open(path, "rb") as stream:
            return stream.read()
    except OSError:
        return None
