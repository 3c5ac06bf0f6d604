"""Where an address py-spy could not place belongs: this process's memory map
(/proc/self/maps) tells JIT code (an executable anonymous mapping) from a bogus
return address (a failed unwind), and a perf map (``/tmp/perf-PID.map``, written
by oneDNN when asked) names the JIT kernels. Stdlib only.
"""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass
from typing import Iterable

JIT_NAME, JIT_LIB = "[JIT code]", "[jit]"
#: Set for a probe process whose native stacks are captured, before the framework
#: loads oneDNN: 2 = "basic Linux perf integration", a perf map of the kernels it
#: generates, always at /tmp/perf-PID.map (oneDNN reads either prefix).
PERFMAP_ENV = {"ONEDNN_JIT_PROFILE": "2", "DNNL_JIT_PROFILE": "2"}
UNKNOWN_NAME = "[unknown]"  # an address inside a known library that has no symbol
_COUNTER = re.compile(r"\.\d+$")


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str
    path: str


class PerfMap:
    """A Linux perf map (``START SIZE name`` per line, hex): the names a JIT gives
    the code it generates. oneDNN numbers its kernels per process
    (``jit_brgemm_kernel_t.3``); the number is dropped so that names align."""

    def __init__(self, entries: Iterable[tuple[int, int, str]] = ()):
        self.entries = sorted(entries)
        self._starts = [e[0] for e in self.entries]

    @classmethod
    def read(cls, path: str) -> "PerfMap":
        out = []
        try:
            with open(path, errors="replace") as fh:
                for line in fh:
                    parts = line.rstrip("\n").split(" ", 2)
                    if len(parts) == 3:
                        try:
                            out.append((int(parts[0], 16), int(parts[1], 16), _COUNTER.sub("", parts[2].strip())))
                        except ValueError:
                            continue
        except OSError:
            pass
        return cls(out)

    def name(self, addr: int) -> str | None:
        entry = self.entry(addr)
        return entry[2] or None if entry else None

    def entry(self, addr: int) -> tuple[int, int, str] | None:
        """(start, size in bytes, name) of the generated kernel holding ``addr``: its
        size is the JIT code a path reached (the scorecard's measure)."""
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self.entries[i][0] + self.entries[i][1]:
            return self.entries[i]
        return None


class Maps:
    """This process's memory map, to place addresses py-spy could not."""

    def __init__(self, mappings: Iterable[Mapping], perfmap: PerfMap | None = None):
        self.maps = sorted(mappings, key=lambda m: m.start)
        self._starts = [m.start for m in self.maps]
        self.perfmap = perfmap or PerfMap()

    @classmethod
    def read(cls, pid: int | str = "self", perfmap: PerfMap | None = None) -> "Maps":
        out = []
        try:
            with open(f"/proc/{pid}/maps") as fh:
                for line in fh:
                    parts = line.split(None, 5)
                    lo, hi = parts[0].split("-")
                    out.append(Mapping(int(lo, 16), int(hi, 16), parts[1], parts[5].strip() if len(parts) > 5 else ""))
        except OSError:
            pass
        return cls(out, perfmap)

    def find(self, addr: int) -> Mapping | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self.maps[i].end:
            return self.maps[i]
        return None

    def classify(self, addr: int) -> tuple[str, str] | None:
        """(name, lib) for an unplaced address: JIT code in an executable anonymous
        mapping (named by the perf map if it has the address), "[unknown]" in a
        file's executable mapping; None for anything else (not executable, not
        mapped): a bogus frame from a failed unwind."""
        m = self.find(addr)
        if m is None or "x" not in m.perms:
            return None
        if not m.path or m.path.startswith(("[anon", "/memfd:", "[heap")) or m.path.endswith("(deleted)"):
            return (self.perfmap.name(addr) or JIT_NAME, JIT_LIB)
        return (UNKNOWN_NAME, os.path.basename(m.path))



def perfmap_path(pid: int | None = None) -> str:
    """Where a JIT writes this process's perf map (fixed by the perf convention)."""
    return f"/tmp/perf-{os.getpid() if pid is None else pid}.map"
