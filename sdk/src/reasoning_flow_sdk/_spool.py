"""The disk spool: batches the server could not take, delivered oldest first when it is back.

One file per batch, named ``<sequence>.s<steps>.f<flows>.json`` where the sequence is the
batch's creation time (ns) and a per-process counter, so a directory listing sorted by name is
the delivery order, whichever process wrote the file. A file is written to a temporary name,
``fsync``ed, renamed into place and the directory ``fsync``ed: a crash leaves a whole batch or
none. Only one process delivers from a spool at a time (an exclusive ``flock`` on ``.lock``
held while draining), so two processes sharing a directory never send a batch twice at once
and never reorder it. The total size is bounded: writing past ``max_bytes`` deletes the oldest
batches first, and says how many steps that dropped.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

_NAME = re.compile(r"^(?P<seq>\d{20}-\d+-\d+)\.s(?P<steps>\d+)\.f(?P<flows>\d+)\.json$")
_STALE_TMP_SECONDS = 3600


@dataclass(frozen=True)
class SpoolFile:
    path: Path
    seq: str
    steps: int
    flows: int
    size: int


class Spool:
    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._drain_fd: int | None = None
        self._ready = False

    def _ensure(self) -> None:
        if not self._ready:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._ready = True

    def files(self) -> list[SpoolFile]:
        """The spooled batches, oldest first."""
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return []
        found = []
        now = time.time()
        for entry in entries:
            match = _NAME.match(entry.name)
            if match is None:
                if entry.name.startswith(".tmp-"):
                    self._remove_stale(entry, now)
                continue
            try:
                size = entry.stat().st_size
            except FileNotFoundError:  # delivered by another process meanwhile
                continue
            found.append(SpoolFile(Path(entry.path), match["seq"], int(match["steps"]), int(match["flows"]), size))
        found.sort(key=lambda spooled: spooled.seq)
        return found

    @staticmethod
    def _remove_stale(entry: os.DirEntry[str], now: float) -> None:
        try:
            if now - entry.stat().st_mtime > _STALE_TMP_SECONDS:
                os.unlink(entry.path)
        except OSError:
            pass

    def is_empty(self) -> bool:
        return not self.files()

    def write(self, seq: str, body: bytes, steps: int, flows: int) -> list[SpoolFile]:
        """Store one batch durably; returns the oldest batches deleted to make room."""
        with self._lock:
            self._ensure()
            dropped = self._make_room(len(body))
            name = f"{seq}.s{steps}.f{flows}.json"
            tmp = self.directory / f".tmp-{name}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                view = memoryview(body)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.directory / name)
            self._fsync_directory()
            return dropped

    def _make_room(self, incoming: int) -> list[SpoolFile]:
        files = self.files()
        total = sum(spooled.size for spooled in files) + incoming
        dropped = []
        for spooled in files:
            if total <= self.max_bytes:
                break
            try:
                os.unlink(spooled.path)
            except FileNotFoundError:
                continue
            total -= spooled.size
            dropped.append(spooled)
        return dropped

    def _fsync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @staticmethod
    def read(spooled: SpoolFile) -> bytes | None:
        try:
            return spooled.path.read_bytes()
        except FileNotFoundError:  # dropped to make room, or delivered by another process
            return None

    def remove(self, spooled: SpoolFile) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(spooled.path)

    def try_acquire(self) -> bool:
        """Become the one deliverer of this spool; False when another process is draining it."""
        if self._drain_fd is not None:
            return True
        self._ensure()
        fd = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._drain_fd = fd
        return True

    def release(self) -> None:
        if self._drain_fd is not None:
            fcntl.flock(self._drain_fd, fcntl.LOCK_UN)
            os.close(self._drain_fd)
            self._drain_fd = None

    def size(self) -> tuple[int, int]:
        files = self.files()
        return len(files), sum(spooled.size for spooled in files)
