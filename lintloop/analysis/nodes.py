"""Questions about CST nodes alone, with no file context: dotted names, call parts, traversal."""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable, Iterator

import libcst as cst


def dotted(expr: cst.BaseExpression) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        base = dotted(expr.value)
        return f"{base}.{expr.attr.value}" if base else None
    return None


def call_name(call: cst.Call) -> str | None:
    """The called attribute or function's last name: `x.numpy()` -> 'numpy', `f(x)` -> 'f'."""
    if isinstance(call.func, cst.Attribute):
        return call.func.attr.value
    if isinstance(call.func, cst.Name):
        return call.func.value
    return None


def receiver(call: cst.Call) -> cst.BaseExpression | None:
    return call.func.value if isinstance(call.func, cst.Attribute) else None


def positional_args(call: cst.Call) -> list[cst.BaseExpression]:
    return [a.value for a in call.args if a.keyword is None and not a.star]


def keyword_arg(call: cst.Call, name: str) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    return None


def argument(call: cst.Call, position: int, name: str) -> cst.BaseExpression | None:
    """The argument passed at `position` or as keyword `name`."""
    value = keyword_arg(call, name)
    if value is not None:
        return value
    positional = positional_args(call)
    return positional[position] if position < len(positional) else None


def string_value(expr: cst.BaseExpression | None) -> str | None:
    if isinstance(expr, cst.SimpleString):
        return expr.evaluated_value if isinstance(expr.evaluated_value, str) else None
    return None


# Fields that hold only layout (whitespace, commas, parentheses, operators): never walked.
_LAYOUT_SUBSTRINGS = ("whitespace", "lpar", "rpar", "leading_lines", "lines_after_decorators")
_LAYOUT_FIELDS = {"comma", "semicolon", "header", "footer", "newline", "dot", "equal", "colon", "operator",
                  "asynchronous", "lbracket", "rbracket", "lbrace", "rbrace", "star", "relative"}
# Per node type, what reads its non-layout fields at once (`operator.attrgetter`, in C).
_CHILD_FIELDS: dict[type, Callable[[cst.CSTNode], tuple[Any, ...]]] = {}


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The syntactic children of a node in field order, without layout nodes.

    Reading dataclass fields directly is an order of magnitude faster than libcst's visitor,
    which rebuilds every node it visits.
    """
    fields = _CHILD_FIELDS.get(type(node))
    if fields is None:
        fields = _CHILD_FIELDS[type(node)] = _field_reader(type(node))
    result: list[cst.CSTNode] = []
    for value in fields(node):
        is_node = _NODE_TYPES.get(type(value))  # `_is_node_type`, inline: a call per field costs here
        if is_node is None:
            is_node = _is_node_type(type(value))
        if is_node:
            result.append(value)
        elif isinstance(value, (tuple, list)):
            result.extend([v for v in value if _is_node_type(type(v))])
    return result


def _field_reader(node_type: type) -> Callable[[cst.CSTNode], tuple[Any, ...]]:
    names = [f.name for f in dataclasses.fields(node_type)
             if f.name not in _LAYOUT_FIELDS and not any(w in f.name for w in _LAYOUT_SUBSTRINGS)]
    if len(names) > 1:
        return operator.attrgetter(*names)
    if names:
        read = operator.attrgetter(names[0])
        return lambda node: (read(node),)
    return lambda node: ()


# Node types, by type: `isinstance(value, cst.CSTNode)` goes through ABCMeta.__instancecheck__ (CSTNode is
# an abstract class), a Python call per field of every node walked.
_NODE_TYPES: dict[type, bool] = {}


def _is_node_type(kind: type) -> bool:
    known = _NODE_TYPES.get(kind)
    if known is None:
        known = _NODE_TYPES[kind] = issubclass(kind, cst.CSTNode)
    return known


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Pre-order traversal (iterative: deeply nested expressions do not hit the recursion limit)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(children(current)))


def names_in(expr: cst.CSTNode) -> set[str]:
    """Names read by an expression (not attribute names, not keyword names, not inside lambdas)."""
    found: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            found.add(node.value)
        elif isinstance(node, (cst.Attribute, cst.Arg)):
            stack.append(node.value)
        elif not isinstance(node, cst.Lambda):
            stack.extend(children(node))
    return found


def names_an_optimizer(name: str | None) -> bool:
    """Does a (dotted) name say it holds an optimizer: `optimizer`, `self.optim`, `opt`, `opt_g`, `d_opt`,
    `generator_optimizer`? Its last part decides, where nothing shows how the object was built."""
    last = (name or "").rsplit(".", 1)[-1].lower()
    return "optim" in last or last == "opt" or last.startswith("opt_") or last.endswith("_opt")


def names_a_scaler(name: str | None) -> bool:
    """`scaler`, `self.grad_scaler`: a GradScaler, whose `step` steps the optimizer it is given."""
    return "scaler" in (name or "").rsplit(".", 1)[-1].lower()


def steps_an_optimizer(owner: cst.BaseExpression | None) -> bool:
    """Is `owner.step()` an optimizer step, by the owner's name: an optimizer's, or a GradScaler's?"""
    name = dotted(owner) if owner is not None else None
    return names_an_optimizer(name) or names_a_scaler(name)


def instance_attribute(expr: cst.CSTNode | None) -> str | None:
    """`self.x` for an attribute of a method's instance, read or assigned: the name a Trainer keeps a
    value under across its methods, as a function keeps one under a local name."""
    if (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self"):
        return f"self.{expr.attr.value}"
    return None


def read_name(expr: cst.CSTNode | None) -> str | None:
    """The name a value is read from: `x`, or an instance attribute `self.x` (None for anything else)."""
    return expr.value if isinstance(expr, cst.Name) else instance_attribute(expr)


def values_read_in(expr: cst.CSTNode) -> set[str]:
    """The names and instance attributes (`self.x`) an expression reads, in one walk: `names_in` and
    the `self.x` whose values flow like names'."""
    found: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name):
            found.add(node.value)
        elif isinstance(node, (cst.Attribute, cst.Arg)):
            attribute = instance_attribute(node)
            if attribute is not None:
                found.add(attribute)
            stack.append(node.value)
        elif not isinstance(node, cst.Lambda):
            stack.extend(children(node))
    return found


def parameter_names(function: cst.FunctionDef | cst.Lambda) -> set[str]:
    """The names of a function's positional and keyword parameters (not `*args` / `**kwargs`)."""
    params = function.params
    return {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}


def dotted_names_in(node: cst.CSTNode) -> set[str]:
    """Names and `a.b` attribute chains read in `node` (`self.model` as well as `self`)."""
    return names_in(node) | {d for n in walk(node) if isinstance(n, cst.Attribute) and (d := dotted(n))}


def calls_within(expr: cst.CSTNode) -> list[cst.Call]:
    return [node for node in walk(expr) if isinstance(node, cst.Call)]


def remainder_in(expr: cst.BaseExpression) -> bool:
    """Does `expr` compute a `%` remainder (`step % log_every == 0`), not `"%d" % x` string formatting?"""
    return any(isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Modulo)
               and not isinstance(n.left, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))
               for n in walk(expr))


def formatted_in_python(expr: cst.BaseExpression) -> bool:
    """A string Python formats where the line runs: an f-string with a field, `"...".format(...)`,
    `"..." % ...`. In traced code it is formatted once, at trace time, from tracers."""
    if isinstance(expr, cst.FormattedString):
        return any(isinstance(part, cst.FormattedStringExpression) for part in expr.parts)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "format":
        return isinstance(expr.func.value, (cst.SimpleString, cst.ConcatenatedString))
    return isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Modulo) \
        and isinstance(expr.left, (cst.SimpleString, cst.ConcatenatedString))


def formatted_when_printed(expr: cst.BaseExpression) -> bool:
    """An argument a print of traced code cannot print as a value: any f-string, or a string formatted
    in Python (`formatted_in_python`). A fix to `tf.print` / `jax.debug.print` would print its
    trace-time text at every call."""
    return isinstance(expr, cst.FormattedString) or formatted_in_python(expr)
