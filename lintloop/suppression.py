"""Suppression comments: `# lintloop: ignore[...]`, `# lintloop: ignore-file[...]`, `# noqa: ...`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lintloop.nesting import scan

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
        # A plain search of the lowered text is faster than a case-blind regex; its bytes lower faster
        # than the text (ASCII letters only: no other character lowers to one of these words' letters).
        lowered = text.encode("utf-8", "surrogatepass").lower()
        return (b"lintloop" in lowered and bool(_LINTLOOP.search(text))) or (
            b"noqa" in lowered and bool(_NOQA_NAMING_OURS.search(text)))

    @classmethod
    def scan(cls, text: str) -> Suppressions:
        """Suppression comments in `text` (only real comments: strings that look like one are ignored),
        read by lintloop's own tokenizer (lintloop.nesting): the same comments on every Python, in any
        grammar up to the newest, in linear time."""
        if "lintloop" not in text and "noqa" not in text.lower():
            return cls()
        comments = scan(text).comments
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
