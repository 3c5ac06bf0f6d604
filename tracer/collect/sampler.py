"""The sampling session: py-spy ``record --native`` attached to this very process,
each loop run under its marker (see tracer.collect.attribution), and the whole
capture of a probe's cases in one session (:func:`capture`).

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
  tracer.collect.maps tells them apart with this process's /proc/self/maps; JIT code
  becomes a frame with lib "[jit]" under its caller, bogus frames are dropped and
  counted. oneDNN names its kernels when asked to (maps.PERFMAP_ENV: it writes
  the Linux perf map ``/tmp/perf-PID.map``), which maps.PerfMap reads, so that a
  JIT frame says which kernel it is (``jit_avx2_conv_fwd_kernel_f32_t``), else it
  is "[JIT code]". Unwinding stops inside JIT code (it has no unwind tables), so
  most JIT samples hang straight under the Python frame: the name is what tells
  the conv kernel from the gemm.
* Unwinding failures (samples py-spy could not take) are attributed to loops by
  the timestamps of py-spy's own warnings (``RUST_LOG=warn``).

Raw facts only: symbol, shared-object basename (``Frame.lib``), sample counts.
Library and ISA tags are derived later (tracer.processing.tags). Stdlib only.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import time
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from tracer.collect.attribution import FrameNamer, Window, build_tree, joined, layer_stats, split_by_marker
from tracer.collect.maps import Maps, PerfMap
from tracer.collect.pyspy_format import ANY_LOG, LOADING, TOTALS, error_kind, parse_raw, parse_warnings
from tracer.trace import Frame, Node


class NativeUnavailable(Exception):
    """py-spy could not be started or attached (missing, no permission, exited)."""


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

    if sys.version_info >= (3, 11):
        code = call.__code__.replace(co_name=marker, co_qualname=marker)
    else:
        code = call.__code__.replace(co_name=marker)
    return types.FunctionType(code, call.__globals__, marker)


_PR_SET_PTRACER, _PR_SET_PTRACER_ANY = 0x59616D61, ctypes.c_ulong(-1)


def allow_ptrace_by_any() -> bool:
    """Let py-spy, this process's child, attach to it: under Yama's ptrace_scope=1
    (Ubuntu's default) only ancestors may ptrace a process unless it opts in.
    False where there is no Yama (nothing to do) or prctl is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        rc: int = libc.prctl(_PR_SET_PTRACER, _PR_SET_PTRACER_ANY, 0, 0, 0)  # ctypes: a C int
        return rc == 0
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
        self.proc: subprocess.Popen[bytes] | None = None
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
        lines = [line.strip() for line in self._read_log().splitlines()
                 if line.strip() and not ANY_LOG.match(line.strip())]
        return " | ".join(lines[-3:]) or "no output"

    def start(self) -> None:
        """Attach; returns once py-spy is sampling. NativeUnavailable says why not."""
        if not self.pyspy or not os.path.isfile(self.pyspy) or not os.access(self.pyspy, os.X_OK):
            where = f" at {self.pyspy}" if self.pyspy else ""
            raise NativeUnavailable(f"py-spy not found{where} "
                                    "(install it in dltrace's environment: pip install py-spy)")
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
                if time.perf_counter() - t0 >= most_s:  # mid-round too: JAX's 26 steps took 6 s a round
                    break
            now = time.perf_counter()
            try:
                new_size = os.path.getsize(self.log)
            except OSError:
                new_size = size
            if new_size != size:
                size = new_size
                n = len(LOADING.findall(self._read_log()))
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
        m = TOTALS.search(self._read_log())
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


def _lib_files(paths: dict[str, str]) -> dict[str, dict[str, Any]]:
    """basename -> the shared object's path and size, for the scorecard to read its
    symbol table later (tracer.elf_code checks the size: the same file)."""
    out = {}
    for lib, path in sorted(paths.items()):
        try:
            out[lib] = {"path": path, "bytes": os.stat(path).st_size}
        except OSError:
            out[lib] = {"path": path, "bytes": None}
    return out


@dataclass
class Job:
    """One loop to sample: ``step`` under ``marker``, for ``seconds``; its tree hangs
    from ``root``."""

    marker: str
    step: Step
    root: Frame
    seconds: float


def _unsampled(steps: dict[str, Step], seconds: float) -> dict[str, float]:
    """marker -> the unsampled seconds per iteration of its step, each step timed once:
    the replicas of a pass are markers of one step (tracer.collect.harness), and timing
    it once per marker took a third of a survey's native capture (measured: 298 s of
    baselines beside 560 s of sampled loops)."""
    timed: dict[int, float] = {}
    for step in steps.values():
        if id(step) not in timed:
            timed[id(step)] = step.time(seconds)
    return {m: timed[id(step)] for m, step in steps.items()}


def capture(pyspy: str, jobs: list[Job], workdir: str, rate: int = 100, idle: bool = False,
            baseline_s: float = 0.15, startup_timeout: float = 60.0, prime: bool = True,
            perfmap: str = "") -> tuple[dict[str, tuple[Node, dict[str, Any]]], dict[str, Any]]:
    """Sample every job's loop in one py-spy session, in the order given; a marker that
    several jobs share is one loop sampled in several windows.

    Returns marker -> (native tree, layer stats), and the session's stats (startup
    time, py-spy's own totals, samples outside the loops, named JIT kernels).
    ``perfmap`` names JIT code (see :class:`PerfMap`). NativeUnavailable when
    py-spy cannot run or attach; the caller records why and keeps the rest."""
    steps = {j.marker: j.step for j in jobs}  # a marker may be sampled in several windows
    # ``baseline_s`` per step, before and after: three BLOCK_S blocks at least. At 0.3 s the
    # two timings were 15 to 19 s of each survey job's capture (about 30 steps); two
    # audits of ResNet-18 at 0.15 s gave native x1.52 and x1.75 forward, x1.95 and x2.02
    # backward, their spreads meeting those of one at 0.3 s (x1.37, x2.89).
    baselines = _unsampled(steps, baseline_s)  # before py-spy attaches
    sampler = Sampler(pyspy, workdir, rate, idle, startup_timeout)
    sampler.start()
    try:
        if prime:
            sampler.prime(list(steps.values()))
        for j in jobs:
            sampler.loop(j.marker, j.step, j.seconds, baselines[j.marker])
    finally:
        raw = sampler.stop()
    before = baselines
    after = _unsampled(steps, baseline_s)  # again: other load on the machine drifts
    baselines = {m: (before[m] + after[m]) / 2 for m in steps}
    kernels = PerfMap.read(perfmap) if perfmap else PerfMap()
    namer = FrameNamer(Maps.read(perfmap=kernels), sys.path)  # read while the JIT code is still mapped
    groups, outside = split_by_marker(parse_raw(raw), list(steps), namer)
    errors = sampler.errors_by_window()
    windows = {m: joined([w for w in sampler.windows if w.marker == m], baselines[m]) for m in steps}
    roots = {j.marker: j.root for j in jobs}
    out = {}
    for m in steps:
        acc = groups[m]
        # the slowdown's spread: each window's time per iteration over each of the two
        # unsampled timings (before py-spy attached, after it left)
        ratios = [w.per_iter_s / b for w in sampler.windows if w.marker == m and w.per_iter_s
                  for b in (before[m], after[m]) if b > 0]
        out[m] = (build_tree(acc.stacks, roots[m]), {**layer_stats(acc, windows[m], errors[m], rate),
                                                     "slowdowns": [round(r, 3) for r in ratios]})
    session = {
        "startup_s": round(sampler.startup_s, 3),
        "prime_s": round(sampler.prime_s, 3),
        "pyspy_samples": sampler.totals[0] if sampler.totals else None,
        "pyspy_errors": sampler.totals[1] if sampler.totals else None,
        "outside_samples": outside,
        "jit_named": len(kernels.entries),
        "lib_paths": _lib_files(namer.lib_paths),
        "rate": rate,
        "idle": idle,
    }
    return out, session
