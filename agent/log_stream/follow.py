"""Following a rolling log file by (inode, offset), safe across rotation. Pure.

The renderer's appenders (Log4j 1 and 2, logback's fixed window) roll by renaming: the live
file `server.log` becomes `server.log.1` (the older ones shift up) and a new `server.log`
starts. So the file being read keeps its inode under a new name: the rest of it is read
there first, then the new live file from its start. A live file that shrank under the same
inode was truncated in place (copytruncate): it is read again from its start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class FileState:
    """What a stat of one file says."""

    path: str
    inode: int
    size: int


@dataclass(frozen=True)
class Position:
    """The first byte of the followed file not yet handled, by inode."""

    inode: int
    offset: int


@dataclass(frozen=True)
class Read:
    path: str
    inode: int
    start: int
    end: int
    final: bool
    """The writer is done with this file (rotated away): its last entry is complete."""


class FollowNote(Enum):
    NONE = "none"
    STARTED_AT_END = "started_at_end"  # a file found at the first look: its past is skipped
    ROTATED = "rotated"  # the followed file was rolled; its rest read under its new name
    ROTATED_AWAY = "rotated_away"  # the followed file is gone (rolled past the last index)
    TRUNCATED = "truncated"  # the live file shrank: read again from its start


@dataclass(frozen=True)
class FollowStep:
    read: Read | None
    """At most one read per look, of at most `max_bytes`."""
    position: Position | None
    """Where to start once the read is handled (the caller may stop short of `read.end`, at
    a held entry, and store its own offset under the same inode instead)."""
    note: FollowNote


def next_read(
    position: Position | None,
    live: FileState | None,
    rotated: Sequence[FileState],
    first_look: bool,
    max_bytes: int,
    history_bytes: int = 0,
) -> FollowStep:
    """The next read of a followed log file. `position`: the stored one (None: never read);
    `live`: the live file (None: not there); `rotated`: its rolled files (any order);
    `first_look`: the agent just started with no stored position at all, so an existing
    file longer than `history_bytes` is skipped to its end (an upgraded agent does not
    resend days of history) while a new VM's files, which its ZooKeeper and controller
    started writing a little before the agent, are read from their start."""
    if live is None:
        return FollowStep(None, position, FollowNote.NONE)
    if position is None:
        if first_look and live.size > history_bytes:
            return FollowStep(None, Position(live.inode, live.size), FollowNote.STARTED_AT_END)
        position = Position(live.inode, 0)
    if position.inode == live.inode:
        note = FollowNote.NONE
        if live.size < position.offset:
            position, note = Position(live.inode, 0), FollowNote.TRUNCATED
        if live.size == position.offset:
            return FollowStep(None, position, note)
        end = min(live.size, position.offset + max_bytes)
        read = Read(live.path, live.inode, position.offset, end, final=False)
        return FollowStep(read, Position(live.inode, end), note)
    old = next((state for state in rotated if state.inode == position.inode), None)
    if old is None or old.size <= position.offset:
        # Rolled past the last kept file, or read to its end: go on with the live file.
        note = FollowNote.ROTATED_AWAY if old is None else FollowNote.ROTATED
        step = next_read(Position(live.inode, 0), live, rotated, False, max_bytes, history_bytes)
        return FollowStep(step.read, step.position, note)
    end = min(old.size, position.offset + max_bytes)
    read = Read(old.path, old.inode, position.offset, end, final=end == old.size)
    return FollowStep(read, Position(old.inode, end), FollowNote.ROTATED)
