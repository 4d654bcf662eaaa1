"""What a probed program changed in files, as it stands after the run: each path created, deleted,
modified, replaced by another kind of entry, or renamed -- never one that was only named.

Two sources, each covering the other's gaps:

- the working folder, listed before the run and after it (``Listing``: each entry's kind, size,
  modification time, inode, mode and link target; links not followed), so that every change there is
  seen however it was made: by Python, by native code (``torch.save`` to a path, TensorFlow's
  checkpoints), by another program it started (``rm -rf``).  Left out: ``__pycache__``, ``.git`` and
  virtual environments (a folder holding ``pyvenv.cfg``): tools' state, not the program's; and the
  contents of a folder that could not be listed before or after.  What else changes the folder during
  the run (an editor, another program) is counted too.  A folder of more than ``LISTED_MAX`` entries is
  not listed at all (the report says so): its changes come from the second source only;
- every path the program's Python code wrote, made, renamed, linked or removed, anywhere (the
  bootstrap's ``file`` events: the path, its folders' links resolved, and the entry it named just
  before the first call), compared with the entry at the end of the run.

An entry under a folder that was created, deleted or renamed is counted in that folder's change
(``entries``), not listed; at most ``CHANGES_KEPT`` changes are kept, in the order of their paths.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lintloop.runtime_probe.bootstrap._lintloop_probe.files import entry

LISTED_MAX = 20_000  # entries of the working folder listed, before and after (about 0.1 s each way)
CHANGES_KEPT = 1_000
_SKIPPED_NAMES = frozenset({"__pycache__", ".git"})


@dataclass(frozen=True)
class Entry:
    """A path's entry, links not followed (the bootstrap's ``files.entry``, as a record)."""

    kind: str  # file, directory, symlink, other
    size: int
    mtime_ns: int
    inode: int
    device: int
    mode: int
    target: str | None  # a link's

    @classmethod
    def at(cls, path: str) -> Entry | None:
        return cls.of(entry(path))

    @classmethod
    def of(cls, fields: Any) -> Entry | None:
        """From the bootstrap's list (None: nothing there, or a list that is not one)."""
        if not isinstance(fields, list) or len(fields) != 7:
            return None
        try:
            return cls(str(fields[0]), *(int(value) for value in fields[1:6]),
                       None if fields[6] is None else str(fields[6]))
        except (TypeError, ValueError):
            return None

    def change_to(self, after: Entry) -> str | None:
        """How this entry became `after` at the same path: "replaced" (another kind, or a folder made anew),
        "modified", or None (the same).  A folder's own size and time follow its contents: left out."""
        if after.kind != self.kind or (self.kind == "directory" and after.inode != self.inode):
            return "replaced"
        if self.kind == "directory":
            return "modified" if after.mode != self.mode else None
        same = (self.size, self.mtime_ns, self.inode, self.mode, self.target) == (
            after.size, after.mtime_ns, after.inode, after.mode, after.target)
        return None if same else "modified"


@dataclass
class Listing:
    """The entries under a folder (relative paths), links not followed; `listed` holds the folders whose
    entries were all read ("" the folder itself), `skipped` the entries left out."""

    root: str
    entries: dict[str, Entry]
    listed: set[str]
    skipped: set[str]

    def knows(self, relative: str) -> bool:
        """Whether the listing tells what stands at `relative`: an entry, or nothing (where the folder it would
        be in was listed, or is known not to be there)."""
        if relative in self.skipped:
            return False
        parent = os.path.dirname(relative)
        while parent not in self.listed:
            if parent in self.skipped or not parent:
                return False
            if parent in self.entries:
                return self.entries[parent].kind != "directory"  # (a folder that was not listed: unknown)
            parent = os.path.dirname(parent)  # (not there: nor is what would be in it, if we know it is not)
        return True

    @classmethod
    def take(cls, root: str, skipped: Iterable[str] = (), limit: int = LISTED_MAX) -> Listing | None:
        """List `root` but the folders `skipped` (absolute paths) and those ``_SKIPPED_NAMES`` names; None where
        there are more than `limit` entries."""
        skip = {os.path.normpath(path) for path in skipped}
        entries: dict[str, Entry] = {}
        listed: set[str] = set()
        left_out: set[str] = set()
        todo = [""]
        while todo:
            relative = todo.pop()
            folder = os.path.join(root, relative) if relative else root
            try:
                with os.scandir(folder) as found:
                    children = list(found)
            except OSError:  # unreadable (or gone): its contents are unknown
                continue
            if any(child.name == "pyvenv.cfg" for child in children) and relative:
                continue
            listed.add(relative)
            for child in children:
                path = os.path.join(relative, child.name) if relative else child.name
                if child.name in _SKIPPED_NAMES or child.path in skip:
                    left_out.add(path)
                    continue
                if len(entries) >= limit:
                    return None
                found_entry = Entry.at(child.path)
                if found_entry is None:
                    continue
                entries[path] = found_entry
                if found_entry.kind == "directory":
                    todo.append(path)
        return cls(root, entries, listed, left_out)


@dataclass
class Change:
    """One path's change, the entry before and after it, and where the program's Python code named it."""

    change: str  # created, deleted, modified, replaced, renamed
    path: str
    kind: str  # of the entry after (deleted: before)
    before: Entry | None
    after: Entry | None
    to: str | None = None  # of a rename
    over: str | None = None  # of a rename onto an entry: that entry's kind
    entries: int = 0  # under a folder created, deleted or renamed: the entries counted in this change
    where: dict[str, Any] = field(default_factory=dict)  # file, line, pid of the first call that named it

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"change": self.change, "path": self.path, "kind": self.kind}
        if self.before is not None and self.after is not None and self.before.kind != self.after.kind:
            found["was"] = self.before.kind
        if self.to is not None:
            found["to"] = self.to
        if self.over is not None:
            found["over"] = self.over
        if self.entries:
            found["entries"] = self.entries
        return {**found, **self.where}


@dataclass
class FileChanges:
    """The changes of one run, in the order of their paths (at most `CHANGES_KEPT`), and what was compared."""

    changes: list[Change]
    total: int  # every change, kept or not
    folder: str  # the working folder
    listed: bool  # whether it was listed (False: it holds more than LISTED_MAX entries)
    unfollowed: bool = False  # a process made more calls than the bootstrap reports

    def to_json(self) -> dict[str, Any]:
        """What was compared, and how many changes there were (the changes themselves: ``ProbeRun.files``)."""
        return {"working_folder": self.folder, "listed": self.listed, "total": self.total,
                "more_calls_than_followed": self.unfollowed}


def file_changes(before: Listing | None, after: Listing | None, events: list[dict[str, Any]],
                 folder: str) -> FileChanges:
    """The changes between the two listings of the working folder `folder` (None: not listed) and, for the paths
    the ``file`` events name that the listings do not judge, between the entry an event saw before its call
    and the entry now."""
    states: dict[str, tuple[Entry | None, Entry | None]] = {}
    judged = before is not None and after is not None
    if judged:
        for relative in before.entries.keys() | after.entries.keys():
            if before.knows(relative) and after.knows(relative):
                states[os.path.join(folder, relative)] = (before.entries.get(relative), after.entries.get(relative))
    where: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.get("type") != "file":
            continue
        site = {key: event[key] for key in ("file", "line", "pid") if event.get(key) is not None}
        for key, state_key in (("path", "before"), ("to", "to_before")):
            path = event.get(key)
            if not isinstance(path, str):
                continue
            where.setdefault(path, site)
            if path in states or (judged and _judged(path, before, after)):
                continue
            states[path] = (Entry.of(event.get(state_key)), Entry.at(path))
    changes = _renamed(_compared(states))
    for change in changes:
        change.where = where.get(change.path) or where.get(change.to or "") or {}
    changes = _folded(sorted(changes, key=lambda c: c.path))
    return FileChanges(changes[:CHANGES_KEPT], len(changes), folder, judged,
                       any(e.get("type") == "file_limit" for e in events))


def _judged(path: str, before: Listing, after: Listing) -> bool:
    """Whether both listings tell what stood at `path` (then theirs is the verdict)."""
    relative = os.path.relpath(path, before.root)
    if relative == os.curdir or relative.startswith(os.pardir):
        return False
    return before.knows(relative) and after.knows(relative)


def _compared(states: dict[str, tuple[Entry | None, Entry | None]]) -> list[Change]:
    changes = []
    for path, (was, now) in states.items():
        if was is None and now is not None:
            changes.append(Change("created", path, now.kind, was, now))
        elif was is not None and now is None:
            changes.append(Change("deleted", path, was.kind, was, now))
        elif was is not None and now is not None:
            how = was.change_to(now)
            if how is not None:
                changes.append(Change(how, path, now.kind, was, now))
    return changes


def _renamed(changes: list[Change]) -> list[Change]:
    """A path deleted and another that now holds the entry it had as one rename: the same inode, size, time and
    link target (an entry made anew can be given a freed inode, never its time to the nanosecond; a rename
    keeps a folder's time, as it does a file's)."""
    def identity(found: Entry) -> tuple:
        return found.device, found.inode, found.kind, found.size, found.mtime_ns, found.target

    arrived = {identity(c.after): c for c in changes if c.change != "deleted" and c.after is not None}
    kept = []
    for change in changes:
        moved = arrived.pop(identity(change.before), None) if change.change == "deleted" and change.before else None
        if moved is None:
            kept.append(change)
            continue
        kept.append(Change("renamed", change.path, change.kind, change.before, moved.after, to=moved.path,
                           over=moved.before.kind if moved.before is not None else None))
        moved.change = ""  # (part of the rename)
    return [c for c in kept if c.change]


def _folded(changes: list[Change]) -> list[Change]:
    """Each change under a folder created, deleted, renamed or replaced by another kind of entry counted in it
    (what was made with it, went with it, moved with it), not listed; `changes` in the order of their paths."""
    kept: list[Change] = []
    holders: dict[str, Change] = {}  # the folders whose changes hold what is under them
    for change in changes:
        holder = next((holders[folder] for folder in _folders_above(change.path) if folder in holders), None)
        if holder is not None and _inside(holder, change):
            holder.entries += 1
            continue
        kept.append(change)
        if (change.kind == "directory" and change.change in ("created", "deleted", "renamed")
                or change.change == "replaced" and change.kind != "directory"
                and change.before is not None and change.before.kind == "directory"):
            holders[change.path] = change
    return kept


def _folders_above(path: str) -> list[str]:
    """The folders `path` lies in, innermost first."""
    found = []
    while True:
        parent = os.path.dirname(path)
        if not parent or parent == path:
            return found
        found.append(parent)
        path = parent


def _inside(holder: Change, change: Change) -> bool:
    """Whether `change` is part of its folder's change `holder`: made with it, gone with it, moved with it."""
    if holder.change == "renamed":
        return (change.change == "renamed" and holder.to is not None
                and change.to == holder.to + change.path[len(holder.path):])
    if holder.change == "replaced":  # a folder, now a file or a link: what was in it went with it
        return change.change == "deleted"
    return change.change == holder.change
