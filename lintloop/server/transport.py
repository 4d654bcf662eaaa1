"""The client's messages read off its byte stream (LSP base protocol: headers, a blank line, a body of
`Content-Length` bytes), within bounds, whatever the stream holds.

pygls's reader holds whatever `Content-Length` announces (99999999999: a MemoryError that ends the
server) and reads header lines of any length. Here a line is read in bounded pieces, a message over
`MAX_MESSAGE_BYTES` is refused, and so is a header block without a usable length. After a refusal the
reader skips to the next `Content-Length` header, also where it ends a line of other bytes (a body runs
on into the next message's header: no newline comes between them). Skipping never takes a real body's
bytes for a header: JSON has raw line ends only between its tokens, and `Content-Length:` can stand
there only inside a string, so such a line's value never reads as a number. A refused message of any
length, even one announcing more bytes than will ever come, is thus skipped without being held, and
the messages after it are read.

A body is then decoded (`decode`) as UTF-8 JSON within bounds of depth and of values
(lintloop.bounded_json): no message can exhaust the stack or the memory of the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from lintloop import bounded_json

# The largest message read: ample for any document an editor syncs (VS Code stops syncing a file to
# its extensions above 50 MB; a JSON string escapes little of a source file), while what one message
# costs the server stays a small multiple of it.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# A header line of any client is under a hundred bytes. Of a longer line only its last this many bytes
# are kept: where the header is that a refused body runs on into.
MAX_HEADER_LINE_BYTES = 8 * 1024

# The most values a message's JSON holds: a hundred times what an editor sends (a notebook of a thousand
# cells is some 10,000; didChangeWatchedFiles, the largest otherwise, carries only the configuration files
# lintloop watches), while what one costs the server stays near 100 MiB (300,000 file events: 113 MiB).
MAX_MESSAGE_VALUES = 1_000_000

_CONTENT_LENGTH = b"content-length:"


@dataclass(frozen=True)
class Refused:
    """Bytes of the stream that are no message the server takes; `reason` starts "refused ..."."""

    reason: str


def read_messages(stream: BinaryIO, max_message_bytes: int = MAX_MESSAGE_BYTES) -> Iterator[bytes | Refused]:
    """The bodies of the client's messages, and a Refused for each run of bytes that is none; ends with
    the stream. Blocking: advance it off the event loop."""
    skipping = False  # since a refusal, until the next message: nothing more is reported
    length: int | None = None
    problem: str | None = None
    header_lines = 0
    while True:
        line = stream.readline(MAX_HEADER_LINE_BYTES)
        if len(line) == MAX_HEADER_LINE_BYTES and not line.endswith(b"\n"):
            if not skipping:
                skipping = True
                yield Refused(f"refused a header line longer than {_size(MAX_HEADER_LINE_BYTES)}")
            line = _end_of_line(stream, line)
        if not line:
            return
        content = line.rstrip(b"\r\n")
        if content:
            header_lines += 1
            start = content.lower().rfind(_CONTENT_LENGTH)
            if start >= 0:
                length, problem = _content_length(content[start + len(_CONTENT_LENGTH):].strip())
            continue
        # A blank line: the end of a header block.
        if length is not None and length > max_message_bytes:
            skipping = True
            yield Refused(f"refused a message of {length} bytes, over the maximum of {_size(max_message_bytes)}")
        elif length is not None:
            body = stream.read(length)
            if len(body) < length:
                return  # the stream ended inside the body
            skipping = False
            yield body
        elif header_lines and not skipping:
            skipping = True
            yield Refused(problem or "refused a message without a Content-Length header")
        length, problem, header_lines = None, None, 0


def decode(body: bytes) -> Any:
    """A message's body as JSON (raises ValueError for a body that is not UTF-8, not JSON, or deeper
    or larger than lintloop.bounded_json.MAX_DEPTH, MAX_MESSAGE_VALUES)."""
    return bounded_json.loads(body.decode("utf-8"), bounded_json.MAX_DEPTH, MAX_MESSAGE_VALUES)


def _end_of_line(stream: BinaryIO, start: bytes) -> bytes:
    """The last MAX_HEADER_LINE_BYTES of a line that began with `start`, up to and with its line end;
    the rest is read in bounded pieces and dropped."""
    line = start
    while not line.endswith(b"\n"):
        more = stream.readline(MAX_HEADER_LINE_BYTES)
        if not more:
            break
        line = (line + more)[-MAX_HEADER_LINE_BYTES:]
    return line


def _content_length(value: bytes) -> tuple[int | None, str | None]:
    """A Content-Length header's value as (length, None), or (None, why the message is refused)."""
    if value.isdigit() and len(value) <= 18:
        return int(value), None
    shown = value[:40].decode("ascii", "replace") + ("..." if len(value) > 40 else "")
    why = "more bytes than any stream carries" if value.isdigit() else "not a number of bytes"
    return None, f"refused a message whose Content-Length is {shown!r}: {why}"


def _size(count: int) -> str:
    for unit, size in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if count % size == 0:
            return f"{count // size} {unit}"
    return f"{count} bytes"
