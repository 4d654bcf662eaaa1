"""Where lintloop keeps what belongs to the user, not to a project: `$XDG_CACHE_HOME/lintloop` (`~/.cache`
when unset or relative, as the XDG spec says). Nothing a working tree holds is ever read from here, and
nothing here is written into a working tree."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path


def user_cache_directory() -> Path:
    """`$XDG_CACHE_HOME/lintloop`, or `~/.cache/lintloop`."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(base) if os.path.isabs(base) else Path.home() / ".cache") / "lintloop"


def private_directory(name: str) -> Path:
    """The folder `name` under the user's lintloop cache, made if need be, that only this user can read
    or write (mode 0700, owned by this user, not a symbolic link): where what lintloop keeps must not be
    readable or replaceable by anyone else. Where the cache folder cannot be used (no home, a read-only
    one), a folder of this user's under the system's temporary folder instead; OSError if neither."""
    reasons = []
    for folder in _candidates(name):
        try:
            return _made_private(folder)
        except (OSError, RuntimeError) as exc:  # RuntimeError: Path.home() without a home
            reasons.append(f"{folder}: {getattr(exc, 'strerror', None) or exc}")
    raise OSError(errno.EACCES, "no private folder to keep it in (" + "; ".join(reasons) + ")")


def _candidates(name: str) -> Iterator[Path]:
    yield user_cache_directory() / name
    if hasattr(os, "geteuid"):
        import tempfile  # only where the cache folder cannot be used: off the start-up path

        yield Path(tempfile.gettempdir()) / f"lintloop-{os.geteuid()}" / name


def _made_private(folder: Path) -> Path:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    # The folder's parent too (`lintloop`, `lintloop-UID`): whoever owns it could swap the folder.
    for checked in (folder.parent, folder):
        status = os.lstat(checked)
        if not stat.S_ISDIR(status.st_mode):
            raise OSError(errno.ENOTDIR, f"{checked} is not a folder (a symbolic link or a file)")
        if hasattr(os, "geteuid") and status.st_uid != os.geteuid():
            raise OSError(errno.EPERM, f"{checked} is owned by another user")
    if hasattr(os, "geteuid") and stat.S_IMODE(status.st_mode) & 0o077:
        os.chmod(folder, 0o700)
    return folder
