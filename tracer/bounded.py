"""Reading a file that came from someone else, with every step bounded.

Traces, gap records and profiler files arrive in folders other people filled. A
named pipe called ``x.json`` blocks ``open()`` forever, a symlink to ``/dev/zero``
never ends, and a 6 MB gzip can expand to 6 GB: each must end as one line naming
the file, before memory or time runs out. So a file is read only when it is a
regular file, at most ``limit`` bytes of it, and gzip is expanded in a stream
that stops at ``limit`` bytes of output.

Stdlib only: the probe harness loads traces with it too.
"""

from __future__ import annotations

import os
import stat
import zlib

GZIP_MAGIC = b"\x1f\x8b"


class TooLarge(ValueError):
    """The file, or what it expands to, is larger than the reader allows."""


class NotRegular(ValueError):
    """The path is a pipe, a device, a socket or a folder, not a file."""


def size(n: int) -> str:
    """A byte count as people read it."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} bytes"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file at ``path`` (symlinks followed), at most
    ``limit`` of them. Opened without blocking, so a named pipe is refused instead of
    waiting for a writer that never comes. Raises OSError, NotRegular or TooLarge."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(f"{_kind(st.st_mode)}, not a file")
        if st.st_size > limit:
            raise TooLarge(f"{size(st.st_size)}, larger than the {size(limit)} allowed")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while being read
        raise TooLarge(f"larger than the {size(limit)} allowed")
    return data


def head(path: str | os.PathLike[str], n: int) -> bytes:
    """The first ``n`` bytes of the regular file at ``path`` (b"" for anything else
    or an unreadable path): enough to recognise a format by its magic bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return b""
    try:
        return os.read(fd, n) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return b""
    finally:
        os.close(fd)


def gunzip(data: bytes, limit: int) -> bytes:
    """``data`` expanded (every gzip member), stopping as soon as the output passes
    ``limit`` bytes: a decompression bomb costs ``limit`` bytes, not what it claims.
    Raises zlib.error or EOFError on corrupt or truncated input, TooLarge past the limit."""
    out = bytearray()
    rest = data
    while rest:
        unz = zlib.decompressobj(16 + zlib.MAX_WBITS)
        chunk = rest
        while True:
            piece = unz.decompress(chunk, limit + 1 - len(out))
            out += piece
            if len(out) > limit:
                raise TooLarge(f"expands to more than the {size(limit)} allowed")
            chunk = unz.unconsumed_tail
            if unz.eof or (not chunk and not piece):
                break
        if not unz.eof:
            raise EOFError("compressed file ended before the end-of-stream marker was reached")
        rest = unz.unused_data.lstrip(b"\x00")  # members may be followed by padding
    return bytes(out)


def read_maybe_gzip(path: str | os.PathLike[str], limit: int) -> tuple[bytes, bytes]:
    """(raw bytes on disk, content expanded if gzip), both bounded by ``limit``."""
    raw = read_regular(path, limit)
    return raw, (gunzip(raw, limit) if raw[:2] == GZIP_MAGIC else raw)


def limit_from_env(name: str, default_mib: int) -> int:
    """A size limit in bytes: ``default_mib`` MiB, or the MiB a user set in ``name``
    (for a machine with the memory to load larger files)."""
    try:
        mib = int(os.environ.get(name, ""))
    except ValueError:
        mib = default_mib
    return max(1, mib) << 20
