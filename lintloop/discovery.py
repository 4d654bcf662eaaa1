"""Which files to lint: directories recursively, honouring .gitignore and `exclude`; explicit files always."""

from __future__ import annotations

import errno
import functools
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from lintloop.config import GitignoreSpec, Settings, gitignore_spec

@dataclass(frozen=True)
class SourceFile:
    path: Path  # to open
    display: str  # as given on the command line, joined with the path below it
    # Named on the command line (always parsed), not found in a directory (parsed only if it can
    # hold a finding: docs/architecture.md, "What is parsed").
    explicit: bool = False
    modified_ns: int = 0  # when found (st_mtime_ns): the most recently modified are linted first
    # The resolved folder it was named in or found below: with the project's root, where `fix` may write it.
    anchor: str = ""


def discover(arguments: list[str], settings: Settings, force_exclude: bool = False) -> tuple[list[SourceFile], list[str]]:
    """Files to lint in a stable order, and one message per argument that cannot be linted (missing,
    a dangling symbolic link, a FIFO, ...) and per directory that cannot be read.

    Files named explicitly are always linted, unless `force_exclude` (for pre-commit, which
    passes every changed file) applies `exclude` to them too. In a directory, only regular files
    (or symbolic links to one) are linted, and symbolic links to directories are not followed.
    """
    exclude_spec = functools.cache(lambda: gitignore_spec(settings.exclude))
    included = _Included(settings.include)
    files: dict[str, SourceFile] = {}  # by resolved path
    problems: list[str] = []
    root = str(settings.root)
    for argument in arguments:
        path = Path(argument)
        if path.is_file():
            resolved = str(path.resolve())
            if force_exclude and _matches(exclude_spec(), resolved, root, ""):
                continue
            # Named: explicit, even where a directory argument found it too. Its folder as named, resolved;
            # a link in the file's own place is the working tree's, not the user's.
            files[resolved] = SourceFile(path, files.get(resolved, SourceFile(path, argument)).display, explicit=True,
                                         modified_ns=path.stat().st_mtime_ns,
                                         anchor=os.path.realpath(os.path.dirname(os.path.abspath(path))))
        elif path.is_dir():
            # A folder named through a link of the working tree: `fix` writes what really lies below the
            # folder the link is in (or in the project), not wherever the link leads.
            anchor = os.path.realpath(os.path.dirname(os.path.abspath(path)) if os.path.islink(path) else path)
            for resolved, found in _walk(path, argument, exclude_spec(), included, root, problems, anchor):
                files.setdefault(resolved, found)
        else:
            problems.append(f"{argument}: {_why_not_lintable(path)}")
    return sorted(files.values(), key=lambda f: f.display), problems


def _why_not_lintable(path: Path) -> str:
    """Why a named path that is neither a regular file nor a directory cannot be linted."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT and not os.path.lexists(path):
            return "no such file or directory"
        kind = "a symbolic link that cannot be followed" if os.path.islink(path) else "cannot be read"
        return f"{kind}: {exc.strerror}"
    return "not a regular file or directory (a FIFO, socket or device): not read"


def _is_regular_file(path: Path) -> bool:
    """A regular file, or a symbolic link to one (not a FIFO, which would block a reader, nor a dangling link)."""
    return _regular_file_status(path) is not None


def _regular_file_status(path: Path) -> os.stat_result | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status if stat.S_ISREG(status.st_mode) else None


class _Included:
    """Which files found in a directory are linted: `include` patterns, matched against the path
    relative to the directory searched."""

    def __init__(self, patterns: list[str]) -> None:
        suffixes = tuple(p[1:] for p in patterns if re.fullmatch(r"\*\.[\w.]+", p))
        # Only `*.ext` patterns (the default): a test of the name's end, no path to build (~50x faster).
        self.suffixes = suffixes if len(suffixes) == len(patterns) else None
        self.spec = gitignore_spec(patterns) if self.suffixes is None else None

    def __call__(self, name: str, path: Path, top: Path) -> bool:
        if self.suffixes is not None:
            return name.endswith(self.suffixes)
        assert self.spec is not None
        return self.spec.match_file(Path(os.path.relpath(path, top)).as_posix())


def _walk(top: Path, argument: str, excluded: GitignoreSpec, included: _Included,
          root: str, problems: list[str], anchor: str) -> list[tuple[str, SourceFile]]:
    """The files to lint below `top`, each with its resolved path. A path is resolved once per
    directory, not per file: os.walk enters real directories only (not links), so a child's resolved
    path is its directory's joined with its name (a file that is a link is resolved by itself).
    Resolved paths are strings: matching thousands of them, pathlib's parsing would cost most."""
    found = []
    top_path = top.resolve()
    top_resolved = str(top_path)
    ignores = [(str(base), spec) for base, spec in _ancestor_gitignores(top_path)]
    resolved_directories = {os.fspath(top): top_resolved}

    def unreadable(error: OSError) -> None:
        problems.append(f"{_display(Path(error.filename), top, argument)}: cannot read directory: {error.strerror}")

    for directory, subdirs, filenames in os.walk(top, onerror=unreadable):
        here = Path(directory)
        here_resolved = resolved_directories.pop(directory)
        if ".gitignore" in filenames:
            ignores = ignores + [(here_resolved, _read_spec(here / ".gitignore"))]

        kept = []
        for name in sorted(subdirs):
            child = os.path.join(here_resolved, name)
            if not _skipped(child, name, True, excluded, root, ignores):
                kept.append(name)
                resolved_directories[os.path.join(directory, name)] = child
        subdirs[:] = kept
        relative = os.path.relpath(directory, top)  # once per directory (_display, per file, costs a relpath each)
        for name in sorted(filenames):
            path = here / name
            status = _regular_file_status(path) if included(name, path, top) else None
            if status is None:
                continue
            resolved = str(path.resolve()) if os.path.islink(path) else os.path.join(here_resolved, name)
            if not _skipped(resolved, name, False, excluded, root, ignores):
                below = name if relative == "." else os.path.join(relative, name)
                found.append((resolved, SourceFile(path, below if argument == "." else os.path.join(argument, below),
                                                   modified_ns=status.st_mtime_ns, anchor=anchor)))
    return found


def _display(path: Path, top: Path, argument: str) -> str:
    """A path found below `top` as the user sees it: joined to the argument that named `top`."""
    relative = os.path.relpath(path, top)
    return relative if argument == "." else os.path.join(argument, relative)


def _skipped(full: str, name: str, is_dir: bool, excluded: GitignoreSpec, root: str,
             ignores: list[tuple[str, GitignoreSpec]]) -> bool:
    """Excluded by configuration (relative to the config root, or by its bare name), or gitignored;
    `full`: the resolved path."""
    suffix = "/" if is_dir else ""
    if _matches(excluded, full, root, suffix) or _matches(excluded, name, None, suffix):
        return True
    return any(_matches(spec, full, base, suffix) for base, spec in ignores)


def _matches(spec: GitignoreSpec, path: str, base: str | None, suffix: str) -> bool:
    """`path` (resolved) matched relative to the directory `base` (resolved; None: as it is); a path
    outside `base` matches nothing."""
    if base is not None:
        prefix = base if base.endswith(os.sep) else base + os.sep
        if not path.startswith(prefix):
            return False
        path = path[len(prefix):]
    return spec.match_file(path.replace(os.sep, "/") + suffix)


def _read_spec(gitignore: Path) -> GitignoreSpec:
    """A .gitignore's patterns. As git does, a pattern that is not valid (a lone backslash) is passed
    over, and a .gitignore that is no regular file (a FIFO would block the run) holds none."""
    try:
        lines = gitignore.read_text(encoding="utf-8", errors="replace").splitlines() \
            if _is_regular_file(gitignore) else []
    except OSError:
        lines = []
    try:
        return gitignore_spec(lines)
    except (ValueError, re.error):
        return gitignore_spec([line for line in lines if _valid_pattern(line)])


def _valid_pattern(line: str) -> bool:
    try:
        gitignore_spec([line])
    except (ValueError, re.error):
        return False
    return True


def _ancestor_gitignores(top: Path) -> list[tuple[Path, GitignoreSpec]]:
    """.gitignore files above `top`, up to the repository root (the directory holding .git)."""
    chain = []
    for directory in top.parents:
        try:
            if (directory / ".gitignore").is_file():
                chain.append((directory, _read_spec(directory / ".gitignore")))
            if (directory / ".git").exists():
                break
        except OSError:  # a directory above that cannot be searched: no repository root is known
            return []
    else:
        return []  # not inside a git repository: no .gitignore above applies
    return list(reversed(chain))
