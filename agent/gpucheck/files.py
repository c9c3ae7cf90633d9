"""Files the user names: reading them without a hang (a FIFO, a device), and writing reports whole or not at all,
to what the path names (`gpucheck node --output`, the cluster's report directory)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _umask()  # read once at import, in the main thread (os.umask is process-wide)


KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def user_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """$XDG_STATE_HOME/gpucheck, ~/.local/state/gpucheck where XDG_STATE_HOME is unset or not absolute (the XDG
    base directory rule): where reports and the history store go by default. Never the current directory: that is
    often a checkout, where a report is easily committed by accident. RuntimeError when there is no home either."""
    env = os.environ if environ is None else environ
    state = env.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):
        home = env.get("HOME") or os.path.expanduser("~")  # the password database's when HOME is unset
        if not os.path.isabs(home):
            raise RuntimeError("no home directory for gpucheck's state directory")
        state = os.path.join(home, ".local", "state")
    return Path(state) / "gpucheck"


def kind_of(mode: int) -> str:
    """What a file that is not a regular one is, in words."""
    return next((what for test, what in KINDS if test(mode)), "not a regular file")


def read_file(path: str | os.PathLike, max_bytes: int, streams: bool = False) -> bytes:
    """At most `max_bytes` + 1 bytes of a file the user named (the caller says what more means). A regular file,
    or with `streams` also a FIFO or character device (`gpucheck parse KIND <(cmd)`): opened without waiting for a
    writer, so a FIFO nobody writes to reads as empty instead of hanging. Anything else is an OSError saying what
    it is ("a FIFO, not a regular file")."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        mode = os.fstat(fd).st_mode
        stream = stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)
        if not (stat.S_ISREG(mode) or (streams and stream)):
            raise OSError(errno.EINVAL, f"{kind_of(mode)}, not a regular file", str(path))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)  # then read as anyone
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_atomically(path: Path, text: str | bytes) -> None:
    """Write `text` (UTF-8; bytes as they are) to `path` as a careful `> path` would. Raises OSError, whose
    strerror says why.

    - A regular file, or no file yet: replaced atomically (readers see the old file or the new one, never half
      of one). An existing file keeps its mode (a node_exporter textfile stays readable) and, where we may, its
      owner; a new one is 0666 & ~umask, as any file a program creates.
    - A symbolic link is followed: its target is replaced, in the target's directory; the link stays a link. Not a
      link someone else made in a directory others can write (a shared report directory, /tmp): gpucheck resolves
      links itself, out of reach of the kernel's protected_symlinks guard, so it applies its own (`planted_link`).
    - A character device or a FIFO (/dev/null, a named pipe a collector reads) and anything reached through
      /proc (/dev/stdout, /dev/fd/N: the caller's own open file) are written in place, appending: they cannot
      be replaced, and replacing /dev/null as root would destroy it. A FIFO nobody reads is refused, not waited on.
    - A directory, a block device or a socket is refused.
    """
    data = text.encode("utf-8") if isinstance(text, str) else text
    if planted := planted_link(path):
        raise PermissionError(errno.EACCES, f"{planted} is a link another user made in a directory others can "
                              "write: not followed", str(path))
    try:
        st: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        st = None  # nothing there yet, or a dangling link: create it (its target), as `>` does
    if st is not None and (not stat.S_ISREG(st.st_mode) or _reached_through_proc(path)):
        _write_in_place(path, st, data)
        return
    target = Path(os.path.realpath(path))  # a link's target; the file itself when it is none
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:64]}.")
    try:
        if st is not None and (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
            with contextlib.suppress(OSError):  # only root may give a file away; others keep their own
                os.fchown(fd, st.st_uid, st.st_gid)
        os.fchmod(fd, stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~UMASK)  # mkstemp makes 0600
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_output(output: str | os.PathLike, text: str | bytes) -> None:
    """A file the user named (--output, -o): its folders made, then written atomically (write_atomically). A name
    ending in "/" names a directory, not a file. Raises OSError, whose strerror says why."""
    if str(output).endswith("/"):  # Path() drops the slash that says "a directory"
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    path = Path(output)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file where a directory must be
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR)) from None
    write_atomically(path, text)


def planted_link(path: Path, max_links: int = 40) -> str | None:
    """The first symbolic link on the way to `path` that someone other than us made in a directory others (its
    group, or everyone) can write, or None. Every link met while resolving is looked at, directories included."""
    me, current = os.geteuid(), Path("/")
    queue = list(Path(os.path.abspath(path)).parts[1:])
    while queue and max_links > 0:
        name = queue.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            current = current.parent
            continue
        candidate = current / name
        try:
            st = os.lstat(candidate)
        except OSError:
            return None  # the rest does not exist yet: no link to follow
        if not stat.S_ISLNK(st.st_mode):
            current = candidate
            continue
        max_links -= 1
        if st.st_uid != me and os.stat(current).st_mode & (stat.S_IWOTH | stat.S_IWGRP):
            return str(candidate)
        target = Path(os.readlink(candidate))
        if target.is_absolute():
            current, queue = Path("/"), [*target.parts[1:], *queue]
        else:
            queue = [*target.parts, *queue]
    return None


def _reached_through_proc(path: Path) -> bool:
    """Whether a link on the way to `path` goes through /proc (/dev/stdout -> /proc/self/fd/1): the file is
    someone's open file, to be written, not replaced (`--output /dev/stdout >> log` must append to log)."""
    current, hops = os.path.abspath(path), 0
    while hops < 40:
        if os.path.realpath(os.path.dirname(current)).split(os.sep)[:2] == ["", "proc"]:
            return True
        if not os.path.islink(current):
            return False
        current = os.path.join(os.path.dirname(current), os.readlink(current))
        hops += 1
    return False


def _write_in_place(path: Path, st: os.stat_result, data: bytes) -> None:
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        what = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file"
        raise OSError(errno.EINVAL, f"{what}, not written", str(path))
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOCTTY | (os.O_NONBLOCK if stat.S_ISFIFO(mode) else 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ENXIO and stat.S_ISFIFO(mode):
            raise OSError(errno.ENXIO, "a FIFO with no reader", str(path)) from None
        raise
    with os.fdopen(fd, "wb") as out:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)  # then write as anyone
        out.write(data)
