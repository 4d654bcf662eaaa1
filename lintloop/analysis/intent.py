"""Code that shows tracing on purpose: a print that announces tracing, a counter or log of traces that
is read to count them (RULES.md "What is a finding"; FRAMEWORK_FACTS.md #28).

Framework-neutral: TensorFlow's guide prints "Tracing with ..." inside a `tf.function`, JAX's docs do
the same in a jitted function, and libraries test that a step compiles once with a `nonlocal` counter
asserted after two calls. Neither is a finding of LL201 / LL206 (prints) or LL202 / LL902 (side effects).

The screen (lintloop.screen) builds a CST of only some units of a file (a top-level statement, a method).
Whether a counter is read is asked of units the screen always selects with the unit that mutates it,
so that the answer is the same with the screen on and off: the traced function's unit, units that name
the traced function (or a name bound to a call of it: `step = jax.jit(train_step)`), and units holding a
call named in `TRACE_READ_TOKENS`, which the rules asking `counts_traces` add to their `Needs`.
"""

from __future__ import annotations

import re

import libcst as cst

from lintloop.analysis.base import Analysis, computed
from lintloop.analysis.index import Scope
from lintloop.analysis.outer_state import declared
from lintloop.analysis.nodes import call_name, string_value, walk

# Words that announce tracing or compiling ("Tracing with", "Traced!", "--- retracing ---",
# "JIT-compiled", "n_traces"); not words that merely contain the letters (`backtrace`, `Traceback`, `tracer`).
_TRACING_WORD = re.compile(r"(?:re)?(?:trac(?:e|es|ed|ing)|compil(?:e|es|ed|ing|ation|ations))", re.IGNORECASE)
# The same words in the languages of the guides people translate: Chinese (追踪/跟踪 trace, 编译 compile),
# Japanese (トレース, コンパイル), Korean (트레이스, 추적, 컴파일). No spaces separate them: searched as text.
_TRACING_WORD_CJK = re.compile(r"追踪|跟踪|编译|編譯|トレース|コンパイル|트레이스|추적|컴파일")
# Words of a text or an identifier: letters split at case changes (`numTraces`, `JITCompiled`).
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
# Calls whose unit the screen selects whenever a rule with these tokens fires: a read of a trace
# counter in such a unit is seen with the screen on and off alike.
_READ_CALLS = ("print", "len", "assertEqual", "assertLen", "assert_equal")
TRACE_READ_TOKENS = tuple(f"call:{name}" for name in _READ_CALLS)
# Methods of a logger (`logging.info`, `logger.warning`, absl `logging.info`).
_LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "log"})
# Calls that only convert a value for showing it (`print(i, x.numpy(), len(y))`).
_SHOWING_CALLS = frozenset({"numpy", "tolist", "item", "len", "str", "repr", "format", "list"})
# Names in these positions are not reads of a variable (the screen records no read for them).
_NOT_READS = (cst.Param, cst.AsName, cst.ImportAlias, cst.NameItem, cst.FunctionDef, cst.ClassDef)

TracedNode = cst.FunctionDef | cst.Lambda
# Where a call may run many times: a program's step, not a guide's one-by-one calls.
_REPEATING = (cst.For, cst.While, cst.FunctionDef, cst.Lambda, cst.CompFor, cst.ClassDef)
# Prints that run on every call of traced code.
_GRAPH_PRINTS = frozenset({"tensorflow.print", "jax.debug.print"})

# What the markdown cell just before a code cell says the cell shows, by topic: a notebook cell under
# "Python side effects run only once, when the function is traced" shows the pitfall on purpose. (回溯, Chinese
# for retrace, also translates a Python traceback: prose about tracing only, never a print's text.)
# A rule names its topic (`Rule.shown_in_prose`); its findings in such a cell are not reported.
PROSE_TOPICS = {
    "tracing": re.compile(r"\b(?:re)?trac(?:e|es|ed|ing)\b|side[- ]effects?|\b(?:runs?|run|executed?|executes|printed|"
                          r"happens?) (?:only )?once\b|only (?:the )?(?:first|once)|"
                          r"回溯|" + _TRACING_WORD_CJK.pattern,
                          re.IGNORECASE),
    "keys": re.compile(r"\bsame (?:random )?(?:keys?|seeds?|numbers|results|values|samples)\b|"
                       r"\breus(?:e|es|ed|ing) (?:the |a )?(?:same )?(?:keys?|seeds?)\b|\bdeterministic", re.IGNORECASE),
}


def prose_shows(topic: str, prose: str) -> bool:
    """Does a notebook's markdown (the cell just before a code cell) speak of `topic` (`PROSE_TOPICS`)?"""
    return PROSE_TOPICS[topic].search(prose) is not None


def names_tracing(text: str) -> bool:
    """Does `text` (a literal's text, an identifier) hold a word that announces tracing or compiling?"""
    return any(_TRACING_WORD.fullmatch(word) for word in _WORDS.findall(text)) or \
        _TRACING_WORD_CJK.search(text) is not None


def literal_texts(call: cst.Call) -> list[str]:
    """The literal text of a call's positional arguments: string literals, the literal parts of
    f-strings, the template of `"...".format(...)` and of `"..." % ...`."""
    texts: list[str] = []
    for arg in call.args:
        if arg.keyword is None and not arg.star:
            texts.extend(_texts_of(arg.value))
    return texts


def _texts_of(expr: cst.BaseExpression) -> list[str]:
    if isinstance(expr, cst.SimpleString):
        text = string_value(expr)
        return [text] if text is not None else []
    if isinstance(expr, cst.ConcatenatedString):
        return _texts_of(expr.left) + _texts_of(expr.right)
    if isinstance(expr, cst.FormattedString):
        return [part.value for part in expr.parts if isinstance(part, cst.FormattedStringText)]
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "format":
        return _texts_of(expr.func.value)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Modulo):
        return _texts_of(expr.left)
    return []


class Intent(Analysis):
    asks = frozenset({"flow"})

    def only_shown(self, call: cst.Call) -> bool:
        """Is `call`'s result only shown: a bare expression statement (a notebook displays it) or an
        argument of the builtin `print`? A guide cell that shows a None gradient shows it on purpose, and
        the None is there for its reader to see; a gradient used (applied, returned) is not this."""
        return self._shown(call)

    def result_only_shown(self, call: cst.Call) -> bool:
        """`only_shown`, or `call`'s result assigned to a name that is then only shown, before the name
        is bound again in its scope (`grads = tape.gradient(z, [x1, x2])` then `grads`: a guide cell
        displaying the None gradient, as a notebook shows a cell's last expression)."""
        parent = self.ctx.parents.get(call)
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1 \
                and isinstance(parent.targets[0].target, cst.Name):
            return self._assigned_to_show(parent, parent.targets[0].target.value)
        return self._shown(call)

    def _shown(self, node: cst.CSTNode) -> bool:
        """Is `node` a statement of its own (a notebook displays it; alone or in a tuple: `dx, dy`) or an
        argument of the builtin `print`?"""
        parent = self.ctx.parents.get(node)
        if isinstance(parent, cst.Element) and isinstance(self.ctx.parents.get(parent), cst.Tuple):
            node = self.ctx.parents[parent]
            parent = self.ctx.parents.get(node)
        return isinstance(parent, cst.Expr) or self._printed(node)

    def only_shows(self, loop: cst.For) -> bool:
        """Does every statement of the loop's body show a value and do nothing else: a `print(...)` (or
        a logger's) of values read without calling anything else, or a bare expression a notebook
        displays? Iterating a dataset only to print its batches shows its order; it trains nothing."""
        body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else (loop.body,)
        for line in body:
            if not isinstance(line, cst.SimpleStatementLine):
                return False
            for statement in line.body:
                if not isinstance(statement, cst.Expr):
                    return False
                value = statement.value
                printing = isinstance(value, cst.Call) and self._prints(value)
                shown = [a.value for a in value.args] if printing else [value]
                if any(isinstance(n, cst.Call) and call_name(n) not in _SHOWING_CALLS for v in shown for n in walk(v)):
                    return False
        return True

    def _assigned_to_show(self, assign: cst.Assign, name: str) -> bool:
        """Is `name`, bound by `assign`, only shown until it is bound again in that scope? Read anywhere
        else (applied, returned, passed, read in a function), its value is used."""
        ctx = self.ctx
        after = ctx.subtree_end[assign]
        later = [b.order for b in ctx.bindings_in(ctx.scope_of(assign), name) if b.order > after]
        until = min(later, default=None)
        reads = [n for n in self._reads_by_name.get(name, ())
                 if ctx.order[n] > after and (until is None or ctx.order[n] < until)]
        return bool(reads) and all(self._shown(n) for n in reads)

    def beside_graph_print(self, call: cst.Call) -> bool:
        """Is a builtin `print(x)` beside a framework print of the same value in the same function
        (`print(num)` and `tf.print(num)`, `jax.debug.print("{}", x)`): a guide showing that one prints once
        while tracing and the other on every call?"""
        shown = {self.ctx.module.code_for_node(a.value) for a in call.args
                 if a.keyword is None and not a.star and not _texts_of(a.value)}
        if not shown:
            return False
        scope = self.ctx.scope_of(call)
        for other in self.ctx.nodes_in_scope(cst.Call, scope).nodes:
            if other is not call and self.ctx.names.callee(other) in _GRAPH_PRINTS:
                printed = {self.ctx.module.code_for_node(a.value) for a in other.args if a.keyword is None}
                if shown <= printed:
                    return True
        return False

    def shown_call_by_call(self, traced: TracedNode) -> bool:
        """Is the traced function called two or more times outside any function or loop, each call's result
        printed (`print(f(x, y))` then `print(f(x2, y2))`; `print("2nd:", jit(g)(5.))`)? A guide showing
        what runs on which call, while tracing and after; a program runs its step in a loop. (Units with a
        `print` are selected by every rule asking this: the answer is the same with the screen on and off.)"""
        printed = self._printed_calls_by_name
        return sum(printed.get(name, 0) for name in self._runner_names(traced)) >= 2

    @computed
    def _printed_calls_by_name(self) -> dict[str, int]:
        """How many calls of each name (`f(x)`, and `jit(g)(5.)` under `g`) outside any function or loop
        have their result printed; counted once per file, whatever asks."""
        counts: dict[str, int] = {}
        for call in self.ctx.nodes(cst.Call):
            if not self._printed(call) or any(isinstance(a, _REPEATING) for a in self.ctx.ancestors(call)):
                continue
            func = call.func
            names = [func.value] if isinstance(func, cst.Name) else [
                a.value.value for a in func.args if isinstance(a.value, cst.Name)] if isinstance(func, cst.Call) else []
            for name in names:
                counts[name] = counts.get(name, 0) + 1
        return counts

    def _printed(self, node: cst.CSTNode) -> bool:
        """Is `node`'s value an argument of the builtin `print`?"""
        parent = self.ctx.parents.get(node)
        printing = self.ctx.parents.get(parent) if isinstance(parent, cst.Arg) else None
        return isinstance(printing, cst.Call) and self.ctx.names.is_builtin(printing.func, "print")

    def announces_tracing(self, call: cst.Call) -> bool:
        """A call (a `print`) whose literal text says it traces, retraces or compiles: the documented way
        to watch tracing (`print("Tracing with", x)`, `print(f"compiling step for {x.shape}")`)."""
        return any(names_tracing(text) for text in literal_texts(call))

    def counts_traces(self, mutation: cst.CSTNode, target: cst.BaseExpression, traced: TracedNode) -> bool:
        """Is `mutation` (inside `traced`, a function TensorFlow or JAX traces) the update of a trace counter
        or trace log whose value is read to count traces: a `global`/`nonlocal` counter incremented
        (`n += 1`, `n = n + 1`, `count[0] += 1`) or a list appended to, whose value (`n`, `len(log)`) is
        asserted (`assert n == 1`, `self.assertEqual(...)`, `np.testing.assert_equal(...)`), or compared or
        printed as a count of traces (the counter's name or the statement's text says trace/compile:
        `if trace_count > 1:`, `print("traces:", n)`, `print(len(traces))`)?

        A counter never read, or read as data (a step for a learning-rate schedule, a list of losses
        averaged later), is not."""
        if not _updates_count(mutation, target):
            return False
        root = target
        while isinstance(root, cst.Subscript):
            root = root.value
        if isinstance(root, cst.Name):
            function = next((a for a in self.ctx.ancestors(mutation) if isinstance(a, cst.FunctionDef)), None)
            home = self._home_scope(root.value, function) if function is not None else None
            if home is None:
                return False
            name, home = self._passed_in(root.value, home)
            reads: list[cst.CSTNode] = [n for n in self._reads_by_name.get(name, ())
                                        if self._refers_to(n, name, home)]
        elif isinstance(root, cst.Attribute):
            reads = list(self._attribute_reads.get(root.attr.value, ()))
        else:
            return False
        name = root.value if isinstance(root, cst.Name) else root.attr.value
        named = names_tracing(name)
        selected = (self._unit_of(mutation), self._unit_of(traced))
        runners = self._runner_names(traced)
        return any(self._counts(read, named) and self._always_selected(read, selected, runners) for read in reads)

    # ----- where the counter lives, and its reads ---------------------------------------------------
    def _home_scope(self, name: str, function: cst.FunctionDef) -> Scope | None:
        """The scope whose `name` the function changes: the module for `global`, the enclosing function
        that binds it for `nonlocal` or an undeclared list."""
        kind = declared(function, name)
        if kind == "global":
            return self.ctx.module
        for scope in self.ctx.enclosing_scopes(function):
            if isinstance(scope, cst.FunctionDef):
                inner = declared(scope, name)
                if inner == "global":
                    return self.ctx.module
                if inner is None and self.ctx.bindings_in(scope, name):
                    return scope
            elif kind != "nonlocal":
                return scope
        return None

    def _passed_in(self, name: str, home: Scope) -> tuple[str, Scope]:
        """Where a factory's parameter comes from: the variable its one caller passes (`make_step(log)`
        passes the module's `log`), whose reads count; else `name` in `home` itself."""
        ctx = self.ctx
        bindings = ctx.bindings_in(home, name)
        if not isinstance(home, cst.FunctionDef) or not bindings or not isinstance(bindings[0].node, cst.Param):
            return name, home
        _, passed = ctx.flow.caller_argument(bindings[0].node) or (None, None)
        if not isinstance(passed, cst.Name):
            return name, home
        outer = next((scope for scope in ctx.enclosing_scopes(passed) if ctx.bindings_in(scope, passed.value)), None)
        return (passed.value, outer) if outer is not None else (name, home)

    def _refers_to(self, read: cst.Name, name: str, home: Scope) -> bool:
        """Does `read` see the `name` of `home` (not a local of a function between them)?"""
        for scope in self.ctx.enclosing_scopes(read):
            if scope is home:
                return True
            if isinstance(scope, cst.FunctionDef):
                kind = declared(scope, name)
                if kind == "global":
                    return home is self.ctx.module
                if kind is None and self.ctx.bindings_in(scope, name):
                    return False
        return False

    @computed
    def _reads_by_name(self) -> dict[str, list[cst.Name]]:
        """Each name's occurrences that read a variable (not a def's name, a parameter, an import)."""
        table: dict[str, list[cst.Name]] = {}
        for node in self.ctx.nodes(cst.Name):
            parent = self.ctx.parents.get(node)
            if self._is_read(node) and not (isinstance(parent, cst.Attribute) and parent.attr is node):
                table.setdefault(node.value, []).append(node)
        return table

    def _is_read(self, name: cst.Name) -> bool:
        """Is this occurrence of a name one the screen records as read (a variable or an attribute, not a
        def's name, a parameter, an import, a keyword argument's name)?"""
        parent = self.ctx.parents.get(name)
        return not isinstance(parent, _NOT_READS) and not (isinstance(parent, cst.Arg) and parent.keyword is name)

    @computed
    def _attribute_reads(self) -> dict[str, list[cst.Attribute]]:
        """`obj.name` attribute reads, by attribute name."""
        table: dict[str, list[cst.Attribute]] = {}
        for node in self.ctx.nodes(cst.Attribute):
            table.setdefault(node.attr.value, []).append(node)
        return table

    # ----- what a read does with the value ----------------------------------------------------------
    def _counts(self, read: cst.CSTNode, named: bool) -> bool:
        """Is `read` (the counter, or the log) asserted, or compared or printed as a trace count (`named`:
        the counter's own name says so)?"""
        parents = self.ctx.parents
        value = read
        while True:  # `n`, `count[0]`, `len(log)`: the count itself
            parent = parents.get(value)
            if isinstance(parent, cst.Subscript) and parent.value is value:
                value = parent
                continue
            call = parents.get(parent) if isinstance(parent, cst.Arg) else None
            if isinstance(call, cst.Call) and self.ctx.names.is_builtin(call.func, "len"):
                value = call
                continue
            break
        statement = self.ctx.statement_of(read)
        compared = isinstance(parents.get(value), (cst.Comparison, cst.ComparisonTarget))
        for ancestor in self.ctx.ancestors(read):
            if isinstance(ancestor, cst.Assert):
                return True
            if isinstance(ancestor, cst.Call) and self._holds_in_args(ancestor, read):
                name = call_name(ancestor) or ""
                if name.startswith("assert"):
                    return True
                if self._prints(ancestor) and (named or self.announces_tracing(ancestor)):
                    return True
            if ancestor is statement:
                break
        return compared and (named or self._announces_in(statement))

    def _holds_in_args(self, call: cst.Call, node: cst.CSTNode) -> bool:
        return any(self.ctx.is_inside(node, arg) for arg in call.args)

    def _prints(self, call: cst.Call) -> bool:
        """A builtin `print`, or a logger's `info`/`warning`/... (`logging.info`, `logger.warning`)."""
        if self.ctx.names.is_builtin(call.func, "print"):
            return True
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in _LOG_METHODS):
            return False
        owner = func.value
        owner_name = owner.attr.value if isinstance(owner, cst.Attribute) else \
            owner.value if isinstance(owner, cst.Name) else ""
        return "log" in owner_name.lower()

    def _announces_in(self, statement: cst.CSTNode) -> bool:
        """Does the literal text around a comparison say trace/compile: its line, or for an `if`, its test
        and the statements directly in its body (`if n > 1: raise RuntimeError("retraced")`)? A loop's
        condition (`while step < total:`) compares data, whatever its body prints."""
        if isinstance(statement, cst.If):
            parts: list[cst.CSTNode] = [statement.test]
            if isinstance(statement.body, cst.IndentedBlock):
                parts.extend(s for s in statement.body.body if isinstance(s, cst.SimpleStatementLine))
            else:
                parts.append(statement.body)
        elif isinstance(statement, cst.SimpleStatementLine):
            parts = [statement]
        else:
            return False
        for part in parts:
            for node in self.ctx.nodes_within((cst.SimpleString, cst.FormattedStringText), part):
                text = string_value(node) if isinstance(node, cst.SimpleString) else node.value
                if text and names_tracing(text):
                    return True
        return False

    # ----- which reads are seen with the screen on and off alike -----------------------------------
    def _unit_of(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The screen's unit around `node`, or a part of it: a method of a top-level class, else the
        top-level statement; None in a class body outside its methods."""
        chain = [node, *self.ctx.ancestors(node)]
        if len(chain) < 2 or not isinstance(chain[-1], cst.Module):
            return None
        top = chain[-2]
        if not isinstance(top, cst.ClassDef):
            return top
        # A method: a def whose block is the class's own body.
        if len(chain) >= 4 and isinstance(chain[-4], cst.FunctionDef):
            return chain[-4]
        return None

    def _always_selected(self, read: cst.CSTNode, selected: tuple[cst.CSTNode | None, ...],
                         runners: frozenset[str]) -> bool:
        """Is the unit of `read` one the screen selects whenever the mutating unit is: one of `selected`,
        one that names a runner of the traced function, or one holding a call of `_READ_CALLS`?"""
        unit = self._unit_of(read)
        if unit is None:
            return False
        if unit in selected:
            return True
        if any(name.value in runners and self._is_read(name) for name in self.ctx.nodes_within(cst.Name, unit)):
            return True
        return any(call_name(call) in _READ_CALLS and not _on_super(call)
                   for call in self.ctx.nodes_within(cst.Call, unit))

    def _runner_names(self, traced: TracedNode) -> frozenset[str]:
        """The traced function's name, and names bound to a call that names it (`step = jax.jit(train_step)`
        at module level, `self.step = tf.function(self._step)`): the screen selects the units naming them."""
        if not isinstance(traced, cst.FunctionDef):
            return frozenset()
        name = traced.name.value
        return frozenset({name} | self._aliases.get(name, set()))

    @computed
    def _aliases(self) -> dict[str, set[str]]:
        """For each name a call reads, the names bound to that call's result (as the screen's `aliases`)."""
        table: dict[str, set[str]] = {}
        for assign in self.ctx.nodes(cst.Assign):
            if len(assign.targets) != 1 or not isinstance(assign.value, cst.Call):
                continue
            target = assign.targets[0].target
            if isinstance(target, cst.Attribute):
                alias = target.attr.value
            elif isinstance(target, cst.Name) and self.ctx.scope_of(assign) is self.ctx.module:
                alias = target.value
            else:
                continue
            read = {n.value for n in self.ctx.nodes_within(cst.Name, assign.value)}
            for name in read:
                table.setdefault(name, set()).add(alias)
        return table


def _on_super(call: cst.Call) -> bool:
    """`super().name(...)`: the screen records no call token for it."""
    func = call.func
    return isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call) \
        and isinstance(func.value.func, cst.Name) and func.value.func.value == "super"


def _updates_count(mutation: cst.CSTNode, target: cst.BaseExpression) -> bool:
    """`x += ...`, `x = x + ...`, `x.append(...)` / `x.extend(...)`: a count or a log growing by one
    trace (not `last = loss`, a value replaced)."""
    if isinstance(mutation, cst.AugAssign):
        return isinstance(mutation.operator, cst.AddAssign)
    if isinstance(mutation, cst.Assign):
        value = mutation.value
        return isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add) and any(
            isinstance(side, cst.Name) and isinstance(target, cst.Name) and side.value == target.value
            for side in (value.left, value.right))
    if isinstance(mutation, cst.Call):
        return call_name(mutation) in ("append", "extend")
    return False
