"""Runs one emulated command (proot + qemu-user) so that it ends as a native
process would. Run as a file by the host's Python (``python -I -S launch.py
PROOT-ARGV...``): stdlib only, no import of dltrace.

Three things differ under proot, and a caller of the probe harness relies on each:

- a guest killed by a signal makes proot exit with status 255, after qemu prints
  ``qemu: uncaught target signal 4 (Illegal instruction)``: this launcher reads that
  line from the guest's stderr (and passes every byte on) and dies by the same
  signal, so the caller sees exit status -4, a crash, not a failure;
- the guest's parent is proot, not the caller: the harness's "die with my parent"
  check (``DLTRACE_PARENT_PID`` against ``getppid()``) would end it at once. The
  launcher makes the check hold link by link: it dies with its caller, proot dies
  with the launcher (PR_SET_PDEATHSIG before exec), and the guest is told proot's
  pid;
- qemu writes a core file of a crashed guest into the working folder: the core size
  limit is set to 0.
"""

from __future__ import annotations

import ctypes
import os
import re
import resource
import signal
import sys

_PR_SET_PDEATHSIG = 1
_SIGNAL_LINE = re.compile(rb"qemu: uncaught target signal (\d+)")
PROOT_SIGNALLED = 255  # proot's exit status when its guest died by a signal


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: launch.py COMMAND [ARG...]", file=sys.stderr)
        return 2
    parent = os.environ.get("DLTRACE_PARENT_PID")
    if parent:
        _die_with_parent()
        if str(os.getppid()) != parent:  # the caller died before the prctl
            return 1
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: becomes proot, with its stderr into the pipe
        try:
            os.close(read_end)
            os.dup2(write_end, 2)
            os.close(write_end)
            if parent:
                _die_with_parent()
                os.environ["DLTRACE_PARENT_PID"] = str(os.getpid())  # the guest's parent is proot
            os.execvp(argv[0], argv)
        except OSError as exc:
            os.write(2, f"cannot run {argv[0]}: {exc.strerror or exc}\n".encode())
        os._exit(127)
    os.close(write_end)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: os.kill(pid, s))
    guest_signal, pending = 0, b""
    while True:
        try:
            chunk = os.read(read_end, 65536)
        except InterruptedError:
            continue
        if not chunk:
            break
        view = memoryview(chunk)
        while view:
            view = view[os.write(2, view):]
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()[-4096:]
        for line in lines:
            found = _SIGNAL_LINE.match(line)
            if found:
                guest_signal = int(found.group(1))
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        guest_signal, code = os.WTERMSIG(status), 128 + os.WTERMSIG(status)
    else:
        code = os.WEXITSTATUS(status)
        if code != PROOT_SIGNALLED:
            return code
    if guest_signal:
        signal.signal(guest_signal, signal.SIG_DFL)
        os.kill(os.getpid(), guest_signal)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
