"""Suppression comments: `# lintloop: ignore[...]`, `# lintloop: ignore-file[...]`, `# noqa: ...`."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

_LINTLOOP = re.compile(r"#\s*lintloop:\s*(?P<verb>ignore-file|ignore)\b(?:\[(?P<codes>[^\]]*)\])?", re.I)
_NOQA_NAMING_OURS = re.compile(r"noqa\s*:[^\n]*\bLL", re.I)
_NOQA = re.compile(r"#\s*noqa\b(?::\s*(?P<codes>[\w\-]+(?:[\s,]+[\w\-]+)*))?", re.I)


@dataclass
class Suppression:
    line: int
    column: int
    end_column: int
    selectors: tuple[str, ...]  # empty: everything
    file_level: bool
    from_noqa: bool
    used: bool = False


@dataclass
class Suppressions:
    entries: list[Suppression] = field(default_factory=list)

    @staticmethod
    def may_report(text: str) -> bool:
        """Can `text` hold a suppression that is reported by itself (LL002, LL003) without any finding?
        Only `# lintloop:` comments and noqa comments naming LL codes can."""
        lowered = text.lower()  # a plain search of the lowered text is faster than a case-blind regex
        return ("lintloop" in lowered and bool(_LINTLOOP.search(text))) or (
            "noqa" in lowered and bool(_NOQA_NAMING_OURS.search(text)))

    @classmethod
    def scan(cls, text: str, host_parses: bool | None = None) -> Suppressions:
        """Suppression comments in `text` (only real comments: strings that look like one are ignored).

        `host_parses`: whether this interpreter's parser reads `text` (None: ask it). Its tokenizer
        finds the comments quickly where it knows the file's grammar; where it does not (PEP 701
        f-strings on Python 3.11), libcst's tree gives the same comments at the same positions."""
        if "lintloop" not in text and "noqa" not in text.lower():
            return cls()
        if host_parses is None:
            host_parses = parses_on_host(text)
        try:
            comments = list(_tokenized_comments(text) if host_parses else _cst_comments(text))
        except (tokenize.TokenError, SyntaxError, cst.ParserSyntaxError, RecursionError):
            return cls()
        entries = []
        for line, col, comment in comments:
            for match in _LINTLOOP.finditer(comment):
                codes = _split(match.group("codes"))
                entries.append(Suppression(line, col + match.start() + 1, col + match.end() + 1, codes,
                                           match.group("verb").lower() == "ignore-file", False))
            for match in _NOQA.finditer(comment):
                codes = _split(match.group("codes"))
                # A noqa naming only other tools' codes (E501) is theirs; a bare one or LL codes are ours.
                ours = tuple(c for c in codes if c.upper().startswith("LL"))
                if codes and not ours:
                    continue
                entries.append(Suppression(line, col + match.start() + 1, col + match.end() + 1, ours,
                                           False, True))
        return cls(entries)

    def suppresses(self, code: str, name: str, lines: tuple[int, ...]) -> bool:
        hit = False
        for entry in self.entries:
            if not entry.file_level and entry.line not in lines:
                continue
            if not entry.selectors or any(s.upper() == code or s.lower() == name for s in entry.selectors):
                entry.used = True
                hit = True
        return hit


def _split(codes: str | None) -> tuple[str, ...]:
    if not codes:
        return ()
    return tuple(c for c in re.split(r"[\s,]+", codes.strip()) if c)


def parses_on_host(text: str) -> bool:
    """Whether this interpreter's own parser reads `text` (its grammar may be older than the file's)."""
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _tokenized_comments(text: str) -> Iterator[tuple[int, int, str]]:
    """(line, 0-based column, text) of each comment, by this interpreter's tokenizer."""
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.start[1], token.string


def _cst_comments(text: str) -> Iterator[tuple[int, int, str]]:
    """(line, 0-based column, text) of each comment, from libcst's tree: any grammar it knows."""
    positions = MetadataWrapper(cst.parse_module(text), unsafe_skip_copy=True).resolve(PositionProvider)
    comments = [(where.start.line, where.start.column, node.value) for node, where in positions.items()
                if isinstance(node, cst.Comment)]
    yield from sorted(comments)
