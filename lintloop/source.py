"""Reading a Python file's bytes into text, and writing text back exactly as it was encoded."""

from __future__ import annotations

import codecs
import io
import os
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path


class UndecodableSource(Exception):
    """The file is binary or not valid in its declared encoding; the message says which."""


@dataclass
class SourceText:
    """A file's text with what is needed to write it back unchanged: encoding, BOM, newline."""

    text: str
    encoding: str
    bom: bool
    newline: str

    @classmethod
    def from_bytes(cls, data: bytes) -> SourceText:
        if b"\x00" in data:
            raise UndecodableSource("file is binary (contains NUL bytes), not Python source")
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError as exc:  # unknown encoding in the coding cookie, or BOM + other cookie
            raise UndecodableSource(str(exc)) from None
        bom = data.startswith(codecs.BOM_UTF8)
        if bom:
            data = data[len(codecs.BOM_UTF8):]
            encoding = "utf-8"
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError as exc:
            raise UndecodableSource(
                f"cannot decode as {encoding}: byte {data[exc.start]:#04x} at offset {exc.start}"
            ) from None
        return cls(text=text, encoding=encoding, bom=bom, newline=_dominant_newline(text))

    def encode(self, text: str) -> bytes:
        data = text.encode(self.encoding)
        return codecs.BOM_UTF8 + data if self.bom else data


def _dominant_newline(text: str) -> str:
    crlf = text.count("\r\n")
    return "\r\n" if crlf and crlf >= text.count("\n") - crlf else "\n"


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that an interruption leaves the old or the new file, never half."""
    mode = path.stat().st_mode
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".lintloop-tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
