"""Content digests: what a finding that read another file records of it (lintloop.analysis.project), and
what the result cache compares on read (lintloop.cache). Below both: neither reaches into the other."""

from __future__ import annotations

import hashlib

ABSENT = ""  # the digest recorded for a file looked for that does not exist or cannot be read


def content_digest(data: bytes) -> str:
    """sha256 of `data`, in hex."""
    return hashlib.sha256(data).hexdigest()


def file_digest(path: str) -> str:
    """`content_digest` of a file's content, or `ABSENT`."""
    try:
        with open(path, "rb") as stream:
            return content_digest(stream.read())
    except OSError:
        return ABSENT
