"""The kernel log as it is written: /dev/kmsg (one record per read, each with its sequence number), or a text file
a site's syslog writes (followed as `tail -F` does: across rotation and truncation). Only what is new is returned,
and the cursor says where reading stopped, so a restarted watcher resumes there and never judges old lines as new.

/dev/kmsg, as the kernel's Documentation/ABI/testing/dev-kmsg says: a read returns one whole record
("PRI,SEQ,USEC,FLAGS;MESSAGE" and indented continuation lines), EAGAIN when there is no more, EPIPE when the record
the reader stood on was overwritten (the reader is moved on: records were lost); a fresh open starts at the oldest
record, SEEK_END moves past the newest.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Any

KMSG = "/dev/kmsg"
RECORD_MAX_B = 8192  # a /dev/kmsg record is at most about 1 KiB of text plus its dictionary; a smaller buffer is EINVAL
READ_MAX_B = 1 << 20  # of a text file, per poll: a flood is read over several polls, never all at once
SEQUENCE = re.compile(rb"^\d+,(\d+),")


class SourceError(Exception):
    """The log cannot be opened or read. str(e) is one line."""


@dataclass
class KernelLog:
    """Follows `path`. `cursor` (from a previous run of the same boot) says where to resume; without one, reading
    starts at the end: the watcher judges what happens from now on (the health check judges the past)."""

    path: str
    boot_id: str | None
    cursor: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)  # what the caller should say once (lost records, a cut log)
    fd: int = -1
    device: bool = False
    seq: int = -1
    ino: tuple[int, int] = (0, 0)
    offset: int = 0
    partial: bytes = b""
    resuming: bool = False

    def open(self) -> None:
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        except OSError as exc:
            raise SourceError(f"cannot open the kernel log {self.path}: {exc.strerror or exc}") from None
        info = os.fstat(self.fd)
        self.device = stat.S_ISCHR(info.st_mode)
        if not self.device and not stat.S_ISREG(info.st_mode):
            self.close()
            raise SourceError(f"{self.path} is neither /dev/kmsg nor a log file")
        self.ino = (info.st_dev, info.st_ino)
        saved = self.cursor or {}
        same_boot = saved.get("boot_id") == self.boot_id and saved.get("source") == self.path
        if self.device:
            if same_boot and isinstance(saved.get("seq"), int):
                self.seq, self.resuming = saved["seq"], True  # the records up to it are skipped as read again
            elif not saved:
                os.lseek(self.fd, 0, os.SEEK_END)
            # another boot's cursor: this boot's records are all new to the watcher
        elif saved and saved.get("ino") == list(self.ino) and isinstance(saved.get("offset"), int) \
                and saved["offset"] <= info.st_size:
            self.offset = saved["offset"]
        elif not saved or saved.get("ino") == list(self.ino):
            self.offset = info.st_size  # no cursor, or the same file cut shorter: from its end
        if not self.device:
            os.lseek(self.fd, self.offset, os.SEEK_SET)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.fd = -1

    @property
    def waitable(self) -> int | None:
        """The descriptor select() may wait on (a device wakes on a new record; a file is always 'readable')."""
        return self.fd if self.device and self.fd >= 0 else None

    def state(self) -> dict[str, Any]:
        """The cursor to save: where the next run resumes."""
        base = {"source": self.path, "boot_id": self.boot_id}
        return {**base, "seq": self.seq} if self.device else {**base, "ino": list(self.ino), "offset": self.offset}

    def read_new(self) -> list[str]:
        """The lines logged since the last call (a record with its continuation lines is one string)."""
        if self.fd < 0:
            self.open()
        return self._records() if self.device else self._lines()

    def _records(self) -> list[str]:
        out: list[str] = []
        while True:
            try:
                data = os.read(self.fd, RECORD_MAX_B)
            except BlockingIOError:
                return out
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten before it was read: the reader was moved on
                    self.notes.append("the kernel log overwrote records before they were read (a flood): some "
                                      "lines were not seen")
                    continue
                raise SourceError(f"cannot read {self.path}: {exc.strerror or exc}") from None
            if not data:
                return out
            found = SEQUENCE.match(data)
            if found is not None:
                seq = int(found.group(1))
                if seq <= self.seq:
                    continue  # read before this restart
                if self.resuming and seq > self.seq + 1:
                    self.notes.append(f"{seq - self.seq - 1} kernel log records were overwritten while the watcher "
                                      "was not running: not seen")
                self.seq, self.resuming = seq, False
            out.append(data.decode("utf-8", errors="replace").rstrip("\n"))

    def _lines(self) -> list[str]:
        self._follow_rotation()
        chunks = []
        size = 0
        while size < READ_MAX_B:
            data = os.read(self.fd, min(RECORD_MAX_B * 8, READ_MAX_B - size))
            if not data:
                break
            chunks.append(data)
            size += len(data)
        self.offset += size
        text = self.partial + b"".join(chunks)
        *whole, self.partial = text.split(b"\n")
        return [line.decode("utf-8", errors="replace") for line in whole if line.strip()]

    def _follow_rotation(self) -> None:
        """A file replaced at the path (rotated): the rest of the old one, then the new from its start. A file cut
        shorter than where reading stood (copytruncate, `> file`): from its new start."""
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return  # rotated away, not yet created again: keep reading the old one
        except OSError as exc:
            raise SourceError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        if (now.st_dev, now.st_ino) != self.ino:
            rest = b""
            while data := os.read(self.fd, READ_MAX_B):
                rest += data
            self.partial += rest
            self.close()
            self.cursor, self.offset = None, 0
            self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
            info = os.fstat(self.fd)
            self.ino = (info.st_dev, info.st_ino)
            self.notes.append(f"{self.path} was rotated: following the new file from its start")
        elif os.fstat(self.fd).st_size < self.offset:
            os.lseek(self.fd, 0, os.SEEK_SET)
            self.offset, self.partial = 0, b""
            self.notes.append(f"{self.path} was cut shorter: reading it again from its start")
