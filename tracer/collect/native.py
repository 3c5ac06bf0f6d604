"""Native stacks: py-spy ``record --native`` attached to this very process.

Why this shape (each point was measured on the five frameworks):

* One py-spy session per probe process, started once after every case is warm:
  py-spy needs 0.1-3 s to attach, so attaching once per loop would cost more than
  the sampling. It then loads each library's symbols lazily, while this process is
  stopped (TensorFlow: seconds); :meth:`Sampler.prime` runs the loops unattributed
  until that is done, so that no sampled loop pays for it.
* Each sampled loop calls the primitive through a function whose code object is
  renamed to a unique *marker*; a sample belongs to the loop whose marker is on
  its stack, and only the frames below the marker are kept. Samples outside any
  marker (between loops, the forward half of a backward loop) are counted, not used.
* py-spy's output goes to files, never to a pipe: py-spy writes while it holds
  this process stopped, and a full pipe that this process would read deadlocks both.
* py-spy prints ``0x... (?)`` for an address it cannot place. That is either code
  generated at run time (oneDNN's and XLA's JIT kernels: an executable anonymous
  mapping) or a bogus return address from a failed unwind (heap, stack, 0x1).
  :class:`Maps` tells them apart with this process's /proc/self/maps; JIT code
  becomes a frame with lib "[jit]" under its caller, bogus frames are dropped and
  counted. oneDNN names its kernels when asked to (:data:`PERFMAP_ENV`: it writes
  the Linux perf map ``/tmp/perf-PID.map``); :class:`PerfMap` reads it, so that a
  JIT frame says which kernel it is (``jit_avx2_conv_fwd_kernel_f32_t``), else it
  is "[JIT code]". Unwinding stops inside JIT code (it has no unwind tables), so
  most JIT samples hang straight under the Python frame: the name is what tells
  the conv kernel from the gemm.
* Unwinding failures (samples py-spy could not take) are attributed to loops by
  the timestamps of py-spy's own warnings (``RUST_LOG=warn``).

Raw facts only: symbol, shared-object basename (``Frame.lib``), sample counts.
Library and ISA tags are derived later (tracer.process.tags). Stdlib only.
"""

from __future__ import annotations

import bisect
import ctypes
import datetime
import os
import re
import signal
import subprocess
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from tracer.trace import Frame, Node

JIT_NAME, JIT_LIB = "[JIT code]", "[jit]"
#: Set for a probe process whose native stacks are captured, before the framework
#: loads oneDNN: 2 = "basic Linux perf integration", a perf map of the kernels it
#: generates, always at /tmp/perf-PID.map (oneDNN reads either prefix).
PERFMAP_ENV = {"ONEDNN_JIT_PROFILE": "2", "DNNL_JIT_PROFILE": "2"}
UNKNOWN_NAME = "[unknown]"  # an address inside a known library that has no symbol
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_OWN = tuple(os.path.join(_ROOT, d) + os.sep for d in ("tracer", "probes"))  # dltrace's own code
_ADDR = re.compile(r"^0x[0-9a-fA-F]+$")
_LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z\s+WARN\s+py_spy\]\s+(.*)$")
_ANY_LOG = re.compile(r"^\[\d{4}-\d\d-\d\dT")  # an env_logger line (RUST_LOG), not py-spy's own message
_LOADING = re.compile(r"(?:loading symbols|loading debug info|loading file|opening \S+ for symbols)")
_TOTALS = re.compile(r"Samples: (\d+) Errors: (\d+)")
_COUNTER = re.compile(r"\.\d+$")


class NativeUnavailable(Exception):
    """py-spy could not be started or attached (missing, no permission, exited)."""


# ----------------------------------------------------------------------------- raw format


@dataclass(frozen=True)
class RawFrame:
    """One frame of py-spy's raw (collapsed) output: ``name (where)``.

    ``where`` is ``file:line`` for Python frames, the shared object for native ones
    (or their source ``file:line`` when the library has debug info), ``?`` where
    py-spy could not place the address."""

    name: str
    where: str
    python: bool
    line: int = 0


_PY_WHERE = re.compile(r"^(.*):(\d+)$")


def parse_frame(text: str) -> RawFrame:
    """Split ``name (where)``; the *last* `` (`` starts ``where``, because C++ symbols
    contain parentheses (``{lambda(int, int)#1}``, ``void (int, int)``)."""
    cut = text.rfind(" (")
    if cut < 0 or not text.endswith(")"):
        return RawFrame(text, "", False)
    name, where = text[:cut], text[cut + 2 : -1]
    m = _PY_WHERE.match(where)  # shared objects never end in ":<digits>"
    if m:
        path = m.group(1)
        # Python source, or a native function py-spy found debug info for (``_ctypes.c:4201``)
        python = path.endswith((".py", ".pyw")) or path.startswith("<")
        return RawFrame(name, path, python, int(m.group(2)))
    return RawFrame(name, where, False)


def parse_raw(text: str) -> list[tuple[tuple[RawFrame, ...], int]]:
    """py-spy ``--format raw``: one stack per line, outermost frame first, frames
    separated by ``;``, then a space and the sample count."""
    out: list[tuple[tuple[RawFrame, ...], int]] = []
    for line in text.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        out.append((tuple(parse_frame(f) for f in stack.split(";")), int(count)))
    return out


def parse_warnings(log: str) -> list[tuple[float, str]]:
    """(epoch seconds, message) of py-spy's ``WARN`` lines: the samples it failed to take."""
    out = []
    for line in log.splitlines():
        m = _LOG_TIME.match(line.strip())
        if m:  # nanosecond fractions: parsed by hand, fromisoformat takes at most 6 digits before 3.11
            stamp = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc)
            out.append((stamp.timestamp() + float(m.group(2) or 0), m.group(3)))
    return out


def error_kind(message: str) -> str:
    """A short, stable name for an unwinding failure ("UNW_EBADREG", "merge", ...)."""
    m = re.search(r"\b(UNW_E[A-Z]+)\b", message)
    if m:
        return m.group(1)
    if "merge native and python" in message:
        return "merge"
    return re.sub(r"\d+", "N", message.split(":", 1)[-1].strip())[:60] or "other"


# ----------------------------------------------------------------------------- maps


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
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self.entries[i][0] + self.entries[i][1]:
            return self.entries[i][2] or None
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


# ----------------------------------------------------------------------------- tree


@dataclass
class Window:
    """One sampled loop: which marker, when (epoch seconds), how it ran."""

    marker: str
    t0: float
    t1: float
    iterations: int
    seconds: float
    baseline_s: float  # seconds per iteration without py-spy (mean of before and after)
    per_iter_s: float = 0.0  # seconds per iteration while sampled (median over blocks)


@dataclass
class _Acc:
    samples: int = 0
    bad_frames: int = 0  # samples from which bogus frames were dropped
    jit: int = 0  # samples with JIT code
    jit_orphans: int = 0  # ... whose native callers were lost (the unwind failed at the JIT frame)
    stacks: list[tuple[list[Frame], int]] = field(default_factory=list)


class FrameNamer:
    """Turns raw frames into trace Frames. Python frames get the module name from
    their file (the sys.path entry stripped, as the Python collector does)."""

    def __init__(self, maps: Maps, paths: Iterable[str] = ()):
        self.maps = maps
        self._bases = sorted({os.path.realpath(p) + os.sep for p in paths if p}, key=len, reverse=True)
        self._cache: dict[RawFrame, Frame | None] = {}

    def relative(self, filename: str) -> str:
        if filename.startswith("<") or not os.path.isabs(filename):
            return filename
        real = os.path.realpath(filename)
        for base in self._bases:
            if real.startswith(base):
                return real[len(base):]
        return os.path.basename(filename)

    def frame(self, raw: RawFrame) -> Frame | None:
        """None drops the frame (a bogus address)."""
        if raw in self._cache:
            return self._cache[raw]
        if raw.python:
            rel = self.relative(raw.where)
            module = rel[:-3].replace("/", ".") if rel.endswith(".py") and not rel.startswith("<") else ""
            if module.endswith(".__init__"):
                module = module[: -len(".__init__")]
            out: Frame | None = Frame("python", module, raw.name, rel, raw.line)
        elif _ADDR.match(raw.name):
            if raw.where in ("?", ""):
                placed = self.maps.classify(int(raw.name, 16))
                out = Frame("native", "", placed[0], lib=placed[1]) if placed else None
            else:
                out = Frame("native", "", UNKNOWN_NAME, lib=os.path.basename(raw.where))
        elif raw.line:  # debug info gave a source file, not the library; the line would split nodes
            out = Frame("native", "", raw.name, file=os.path.basename(raw.where))
        else:
            out = Frame("native", "", raw.name, lib=os.path.basename(raw.where) if raw.where != "?" else "")
        self._cache[raw] = out
        return out


def _own(raw: RawFrame) -> bool:
    return raw.python and raw.where.startswith(_OWN)


def split_by_marker(samples: list[tuple[tuple[RawFrame, ...], int]], markers: Iterable[str],
                    namer: FrameNamer) -> tuple[dict[str, _Acc], int]:
    """Group samples by the loop marker on their stack, keeping the frames below it
    (without dltrace's own Python frames and bogus addresses). Returns the groups and
    the number of samples outside every marker."""
    wanted = set(markers)
    groups = {m: _Acc() for m in wanted}
    outside = 0
    for stack, count in samples:
        idx = next((i for i in range(len(stack) - 1, -1, -1) if stack[i].python and stack[i].name in wanted), None)
        if idx is None:
            outside += count
            continue
        acc = groups[stack[idx].name]
        acc.samples += count
        frames, bad = [], False
        for raw in stack[idx + 1 :]:
            if _own(raw):
                continue
            f = namer.frame(raw)
            if f is None:
                bad = True
                continue
            frames.append(f)
        acc.bad_frames += count if bad else 0
        jit = [i for i, f in enumerate(frames) if f.lib == JIT_LIB]
        if jit:
            acc.jit += count
            acc.jit_orphans += count if jit[0] == 0 or frames[jit[0] - 1].kind != "native" else 0
        acc.stacks.append((frames, count))
    return groups, outside


def build_tree(stacks: list[tuple[list[Frame], int]], root: Frame) -> Node:
    """Merge stacks into a tree: root count = samples, node count = samples that
    passed through that frame in that calling context."""
    top = Node(root)
    index: dict[int, dict[Frame, Node]] = {}
    for frames, count in stacks:
        top.count += count
        node = top
        for f in frames:
            kids = index.setdefault(id(node), {})
            child = kids.get(f)
            if child is None:
                child = kids[f] = Node(f)
                node.children.append(child)
            child.count += count
            node = child
    return top


# ----------------------------------------------------------------------------- session


@dataclass
class Step:
    """One iteration of a sampled loop: ``prepare()`` (not attributed: the fresh
    forward a backward pass needs), ``call(state)`` (attributed), ``sync()``."""

    call: Callable[[Any], Any]
    prepare: Callable[[], Any] | None = None
    sync: Callable[[], Any] | None = None

    def run(self, wrap: Callable[[Callable[[Any], Any], Any], Any] | None = None) -> None:
        state = self.prepare() if self.prepare else None
        wrap(self.call, state) if wrap else self.call(state)
        if self.sync:
            self.sync()

    def time(self, seconds: float, least: int = 3) -> float:
        """Seconds per iteration, unsampled: the baseline of the slowdown."""
        return _timed_blocks(lambda: self.run(), seconds, least)[0]


#: Slowdowns compare medians of per-iteration times over short blocks: on a shared
#: machine one preempted block would otherwise decide the ratio (measured: torch's
#: baseline varied 8x between 0.3 s runs while its sampled loop did not).
BLOCK_S = 0.05


def _timed_blocks(run: Callable[[], Any], seconds: float, least: int = 3) -> tuple[float, int, float]:
    """Run ``run`` for ``seconds`` (at least ``least`` times); returns the median over
    ~BLOCK_S blocks of the seconds per iteration, the iterations, the seconds taken."""
    n, blocks = 0, []
    t0 = b0 = time.perf_counter()
    nb = 0
    while True:
        run()
        n, nb = n + 1, nb + 1
        now = time.perf_counter()
        if now - b0 >= BLOCK_S:
            blocks.append((now - b0) / nb)
            b0, nb = now, 0
        if n >= least and now - t0 >= seconds:
            break
    if nb:
        blocks.append((now - b0) / nb)
    blocks.sort()
    return blocks[len(blocks) // 2], n, now - t0


def _marked(marker: str) -> Callable[[Callable[[Any], Any], Any], Any]:
    """``call(fn, arg) -> fn(arg)`` under a code object named ``marker``: the frame
    that attributes a sample to its loop (py-spy reports co_qualname)."""

    def call(fn: Callable[[Any], Any], arg: Any) -> Any:
        return fn(arg)

    code = call.__code__.replace(co_name=marker, **({"co_qualname": marker} if sys.version_info >= (3, 11) else {}))
    return types.FunctionType(code, call.__globals__, marker)


_PR_SET_PTRACER, _PR_SET_PTRACER_ANY = 0x59616D61, ctypes.c_ulong(-1)


def allow_ptrace_by_any() -> bool:
    """Let py-spy, this process's child, attach to it: under Yama's ptrace_scope=1
    (Ubuntu's default) only ancestors may ptrace a process unless it opts in.
    False where there is no Yama (nothing to do) or prctl is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PTRACER, _PR_SET_PTRACER_ANY, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def ptrace_hint(why: str) -> str:
    """What to do when the kernel refused the attach, in a few words ("" otherwise)."""
    if not re.search(r"(?i)permission|not permitted|EPERM|ptrace", why):
        return ""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as fh:
            scope = fh.read().strip()
    except OSError:
        scope = ""
    if scope in ("2", "3"):
        return f" (kernel.yama.ptrace_scope={scope} allows ptrace only to root/CAP_SYS_PTRACE, or not at all)"
    return " (ptrace refused: in a container, run it with --cap-add SYS_PTRACE)"


class Sampler:
    """One py-spy session attached to this process; loops are sampled in turn.

    ``rate`` samples per second, ``idle`` also keeps samples of a thread that waits
    (py-spy drops them by default), ``startup_timeout`` bounds the wait for py-spy to
    read the symbols and take its first sample."""

    def __init__(self, pyspy: str, workdir: str, rate: int = 100, idle: bool = False,
                 startup_timeout: float = 60.0, extra: Iterable[str] = ()):
        self.pyspy, self.rate, self.idle = pyspy, rate, idle
        self.workdir, self.startup_timeout, self.extra = workdir, startup_timeout, list(extra)
        self.out = os.path.join(workdir, "pyspy.raw")
        self.log = os.path.join(workdir, "pyspy.log")
        self.proc: subprocess.Popen | None = None
        self.windows: list[Window] = []
        self.startup_s = 0.0
        self.prime_s = 0.0
        self.totals: tuple[int, int] | None = None

    def _read_log(self) -> str:
        try:
            with open(self.log, errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""

    def _why(self) -> str:
        lines = [l.strip() for l in self._read_log().splitlines() if l.strip() and not _ANY_LOG.match(l.strip())]
        return " | ".join(lines[-3:]) or "no output"

    def start(self) -> None:
        """Attach; returns once py-spy is sampling. NativeUnavailable says why not."""
        if not self.pyspy or not os.path.isfile(self.pyspy) or not os.access(self.pyspy, os.X_OK):
            where = f" at {self.pyspy}" if self.pyspy else ""
            raise NativeUnavailable(f"py-spy not found{where} (install it in dltrace's environment: pip install py-spy)")
        cmd = [self.pyspy, "record", "--native", "--pid", str(os.getpid()), "--format", "raw", "--rate", str(self.rate),
               "--function", "--full-filenames", "--output", self.out, *(["--idle"] if self.idle else []), *self.extra]
        # warn: the samples py-spy failed to take; remoteprocess=info: the libraries
        # it loads symbols for (see prime()).
        env = {**os.environ, "RUST_LOG": os.environ.get("DLTRACE_RUST_LOG", "warn,remoteprocess=info")}
        allow_ptrace_by_any()
        t0 = time.perf_counter()
        with open(self.log, "wb") as log:
            try:
                # in this process's group: a probe stopped with its group takes py-spy with it
                self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
            except OSError as exc:
                raise NativeUnavailable(f"cannot run py-spy ({exc.strerror or exc})") from None
        deadline = t0 + self.startup_timeout
        while "Sampling process" not in self._read_log():
            if self.proc.poll() is not None:
                raise NativeUnavailable(f"py-spy could not attach (exit {self.proc.returncode}): {self._why()}"
                                        f"{ptrace_hint(self._why())}")
            if time.perf_counter() > deadline:
                self._kill()
                raise NativeUnavailable(f"py-spy did not start sampling within {self.startup_timeout:g} s")
            time.sleep(0.02)
        self.startup_s = time.perf_counter() - t0

    def prime(self, steps: list["Step"], quiet_s: float = 0.4, most_s: float = 10.0) -> float:
        """Run the steps, unattributed, until py-spy has loaded the symbols of every
        library they reach (no new "loading symbols" line for ``quiet_s``). py-spy
        loads symbols lazily, while this process is stopped: for TensorFlow's ~100
        shared objects that took seconds, all inside the first sampled loop."""
        t0 = last = time.perf_counter()
        size, loads = -1, 0
        while True:
            for step in steps:
                step.run()
            now = time.perf_counter()
            try:
                new_size = os.path.getsize(self.log)
            except OSError:
                new_size = size
            if new_size != size:
                size = new_size
                n = len(_LOADING.findall(self._read_log()))
                if n != loads:
                    loads, last = n, now
            if (now - last >= quiet_s and now - t0 >= quiet_s) or now - t0 >= most_s:
                self.prime_s = now - t0
                return self.prime_s

    def loop(self, marker: str, step: "Step", seconds: float, baseline_s: float) -> Window:
        """Run ``step`` for ``seconds``; only its ``call`` runs under ``marker``."""
        marked = _marked(marker)
        t0 = time.time()
        per_iter, n, took = _timed_blocks(lambda: step.run(marked), seconds, least=1)
        w = Window(marker, t0, time.time(), n, took, baseline_s, per_iter)
        self.windows.append(w)
        return w

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout: float = 60.0) -> str:
        """Stop sampling (SIGINT makes py-spy write its output) and return the raw text."""
        if self.proc is None:
            return ""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._kill()
                raise NativeUnavailable(f"py-spy did not write its output within {timeout:g} s") from None
        m = _TOTALS.search(self._read_log())
        self.totals = (int(m.group(1)), int(m.group(2))) if m else None
        try:
            with open(self.out, errors="replace") as fh:
                return fh.read()
        except OSError:
            raise NativeUnavailable(f"py-spy wrote no output (exit {self.proc.returncode}): {self._why()}") from None

    def errors_by_window(self) -> dict[str, dict[str, int]]:
        """marker -> {error kind: count}, from py-spy's timestamped warnings."""
        out: dict[str, dict[str, int]] = {w.marker: {} for w in self.windows}
        for stamp, msg in parse_warnings(self._read_log()):
            if "Failed to get stack trace" not in msg:
                continue
            for w in self.windows:
                if w.t0 - 0.005 <= stamp <= w.t1 + 0.005:
                    kind = error_kind(msg)
                    out[w.marker][kind] = out[w.marker].get(kind, 0) + 1
                    break
        return out


def layer_stats(acc: _Acc, window: Window, errors: dict[str, int], rate: int) -> dict[str, Any]:
    """What Run.stats["layers"]["native"] records for one sampled loop."""
    per_iter = window.per_iter_s
    return {
        "sampled": True,
        "samples": acc.samples,
        "errors": sum(errors.values()),
        "error_kinds": errors,
        "bad_frames": acc.bad_frames,
        "jit_samples": acc.jit,
        "jit_orphan_samples": acc.jit_orphans,
        "rate": rate,
        "duration_s": round(window.seconds, 4),
        "iterations": window.iterations,
        "slowdown": round(per_iter / window.baseline_s, 3) if per_iter and window.baseline_s else None,
    }


@dataclass
class Job:
    """One loop to sample: ``step`` under ``marker``, for ``seconds``; its tree hangs
    from ``root``."""

    marker: str
    step: Step
    root: Frame
    seconds: float


def perfmap_path(pid: int | None = None) -> str:
    """Where a JIT writes this process's perf map (fixed by the perf convention)."""
    return f"/tmp/perf-{os.getpid() if pid is None else pid}.map"


def capture(pyspy: str, jobs: list[Job], workdir: str, rate: int = 100, idle: bool = False,
            baseline_s: float = 0.3, startup_timeout: float = 60.0, prime: bool = True,
            perfmap: str = "") -> tuple[dict[str, tuple[Node, dict]], dict]:
    """Sample every job's loop in one py-spy session.

    Returns marker -> (native tree, layer stats), and the session's stats (startup
    time, py-spy's own totals, samples outside the loops, named JIT kernels).
    ``perfmap`` names JIT code (see :class:`PerfMap`). NativeUnavailable when
    py-spy cannot run or attach; the caller records why and keeps the rest."""
    baselines = {j.marker: j.step.time(baseline_s) for j in jobs}  # before py-spy attaches
    sampler = Sampler(pyspy, workdir, rate, idle, startup_timeout)
    sampler.start()
    try:
        if prime:
            sampler.prime([j.step for j in jobs])
        for j in jobs:
            sampler.loop(j.marker, j.step, j.seconds, baselines[j.marker])
    finally:
        raw = sampler.stop()
    for w, j in zip(sampler.windows, jobs):  # again after: other load on the machine drifts
        w.baseline_s = (w.baseline_s + j.step.time(baseline_s)) / 2
    kernels = PerfMap.read(perfmap) if perfmap else PerfMap()
    namer = FrameNamer(Maps.read(perfmap=kernels), sys.path)  # read while the JIT code is still mapped
    groups, outside = split_by_marker(parse_raw(raw), [j.marker for j in jobs], namer)
    errors = sampler.errors_by_window()
    windows = {w.marker: w for w in sampler.windows}
    out = {}
    for j in jobs:
        acc = groups[j.marker]
        out[j.marker] = (build_tree(acc.stacks, j.root), layer_stats(acc, windows[j.marker], errors[j.marker], rate))
    session = {
        "startup_s": round(sampler.startup_s, 3),
        "prime_s": round(sampler.prime_s, 3),
        "pyspy_samples": sampler.totals[0] if sampler.totals else None,
        "pyspy_errors": sampler.totals[1] if sampler.totals else None,
        "outside_samples": outside,
        "jit_named": len(kernels.entries),
        "rate": rate,
        "idle": idle,
    }
    return out, session
