"""Runs probes as subprocesses in their framework's environment and reads the traces
back. The tool's own process never imports a framework: a crash, a hang or a
missing GPU in the probe becomes a ProbeFailed with one readable line."""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Iterable
from pathlib import Path

from tracer import emulation, envs, tempdirs
from tracer.emulation.layout import bindable, emulated_home
from tracer.collect import cbuild
from tracer.collect.maps import PERFMAP_ENV, perfmap_path
from tracer.collect.vendor_log import VERBOSE_ENV
from tracer.contract import (EMULATED_ENV, ERROR_SUFFIX, EXACT_LAYERS, MODELS, PASSES, WORKLOADS, CaseError,
                             CaseRequest, EmulatedCpu, Exit, THREAD_ENV, ProbeRequest, UserWorkload, default_shape,
                             workload_passes)
from tracer.emulation.guest import Bind
from tracer.errors import DltraceError, EnvNotReady, FailureKind, ProbeFailed, UsageError
from tracer.paths import code_path, package_bind
from tracer.registry_entries import Framework
from tracer.trace import Trace, TraceFormatError, load, save

DEFAULT_TIMEOUT = 600.0

#: Probe processes running now, so that an interrupted dltrace stops them: they run
#: in their own process group (a probe's children, py-spy among them, go with it).
_live: set[subprocess.Popen[bytes]] = set()
_live_lock = threading.Lock()
_stopping = threading.Event()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stop_all() -> None:
    """Stop every running probe and start no more: dltrace is being interrupted."""
    _stopping.set()
    with _live_lock:
        for proc in list(_live):
            _kill(proc)


@dataclass(frozen=True)
class CaseSpec:
    primitive: str
    api: str = "functional"
    shape: tuple[int, ...] = ()
    passes: tuple[str, ...] = PASSES
    #: "python" is always traced; "op" and "library" are cheap; "native" costs seconds
    #: per case (py-spy sampling), so it is asked for: `dltrace probe` does by default.
    layers: tuple[str, ...] = EXACT_LAYERS
    #: the user's own workload, when ``primitive`` is its name (its api is USER_API)
    user: UserWorkload | None = None

    def resolved_shape(self) -> tuple[int, ...]:
        if self.user is not None:  # the user's code makes its own inputs
            return ()
        return self.shape or default_shape(self.primitive)

    def resolved_passes(self) -> tuple[str, ...]:
        """The passes asked for that the workload has (an optimizer step has no backward;
        a user's single step callable says so when it runs)."""
        if self.user is not None:
            return tuple(p for p in PASSES if p in self.passes)
        return tuple(p for p in self.passes if p in workload_passes(self.primitive))

    def slug(self) -> str:
        shape = "" if not self.shape else "-" + "x".join(map(str, self.shape))
        return f"{self.primitive}-{self.api}{shape}"


@dataclass
class CaseResult:
    spec: CaseSpec
    path: Path | None = None
    error: str | None = None
    detail: str = ""  # the traceback, for logs; never printed by default
    #: where the probe's seconds went for this case, by phase (tracer.collect.harness.Spent)
    spent: dict[str, float] = field(default_factory=dict)

    def load(self) -> Trace:
        if self.path is None:
            raise ProbeFailed(self.error or "no trace")
        return load(self.path)


def _choices(kind: str, value: str, valid: Iterable[str]) -> UsageError:
    return UsageError(f"unknown {kind} '{value}' (choose from: {', '.join(valid)})")


def check(frameworks: dict[str, Framework], framework: str, primitive: str | None = None,
          device: str = "cpu", variant: str | None = None, api: str | None = None,
          user: UserWorkload | None = None) -> Framework:
    """Validate a request against the registry; each problem is one line naming the choices."""
    if framework not in frameworks:
        raise _choices("framework", framework, frameworks)
    fw = frameworks[framework]
    if user is not None:
        check_workload(user)
        primitive, api = None, None  # the user's code: its name is its own, its level its own
    if primitive is not None and primitive not in WORKLOADS:
        raise _choices("primitive or model", primitive, WORKLOADS)
    if device not in fw.devices:
        raise _choices(f"device for {framework}", device, fw.devices)
    if variant not in (None, "default") and variant not in fw.variants:
        raise _choices(f"variant for {framework}", variant, ["default", *fw.variants])
    if api is not None and api not in fw.apis and primitive not in MODELS:
        # a model's levels are its own (tracer.contract.MODELS); a probe that lacks one says so
        raise _choices(f"API level for {framework}", api, fw.apis)
    return fw


def check_workload(user: UserWorkload) -> UserWorkload:
    """A workload file that is there to be read, said in one line before any probe
    starts (the probe process imports it; what goes wrong in it is said there)."""
    path = Path(user.file)
    if not path.exists():
        raise UsageError(f"workload {user.file}: no such file")
    if not path.is_file():
        raise UsageError(f"workload {user.file}: not a regular file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"workload {user.file}: not readable")
    return user


def find_pyspy() -> str:
    """py-spy for the native layer: $DLTRACE_PYSPY, else the one installed beside this
    Python (dltrace's own environment: the framework environments do not have it),
    else the PATH. "" if none: the traces then say so in their native_error."""
    if os.environ.get("DLTRACE_PYSPY"):
        return os.environ["DLTRACE_PYSPY"]
    beside = Path(sys.executable).parent / "py-spy"
    if beside.exists():
        return str(beside)
    return shutil.which("py-spy") or ""


def _tail(stderr: Capture, lines: int = 3, chars: int = 300) -> str:
    """The probe's last few lines of standard error (its progress lines left out),
    each cut to ``chars``: a workload's one endless line must not become the message."""
    keep = [line.strip() for line in stderr.text().splitlines() if line.strip() and not line.startswith("done ")]
    return " | ".join(line if len(line) <= chars else line[:chars] + "…" for line in keep[-lines:])


def _emulated(fw: Framework, cpu: str, binds: list[Bind]) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run ``fw``'s emulated aarch64 python as ``cpu``,
    and what the trace is to say of it (contract.EMULATED_ENV, read by the harness)."""
    if fw.aarch64 is None:
        raise UsageError(f"{fw.name} has no aarch64 entry in the registry: it cannot run on an emulated CPU")
    model = emulation.model(cpu)  # an unknown model is a UsageError naming the choices
    if fw.aarch64.unavailable:
        raise DltraceError(f"{fw.name} has no aarch64 build: {fw.aarch64.unavailable}")

    bindable(emulated_home())  # a ':' in DLTRACE_HOME: said first, not "not set up" nor "No module named"
    if emulation.status(fw.name) is None:
        raise EnvNotReady(f"{fw.name}: emulated aarch64 environment not set up; run: dltrace env setup {fw.name} "
                          f"--arch aarch64")
    # the C collector, cross-compiled for the guest where it is missing (a changed
    # source); where it cannot be, the guest's trace says why and the Python collector runs
    with contextlib.suppress(cbuild.Unavailable):
        emulation.build_core()
    ext = cbuild.cache_dir()  # the guest loads it from the cache, at the same path
    ext.mkdir(parents=True, exist_ok=True)
    argv, env = emulation.command(fw.name, cpu, [*binds, ext])
    env[EMULATED_ENV] = EmulatedCpu(cpu, model.description, f"{model.midr:#x}", model.qemu_spec(),
                                    f"QEMU {emulation.qemu_version()} user mode, under proot").to_json()
    return argv, env


def run_probe(
    fw: Framework,
    cases: list[CaseSpec],
    out_dir: Path,
    device: str = "cpu",
    variant: str = "default",
    timeout: float = DEFAULT_TIMEOUT,
    warmup: int = 3,
    command: str = "",
    pyspy: str | None = None,
    cpu: str = "",
    kind: str = "trace",
    threads: int | None = None,
    door: str = "eager",
) -> list[CaseResult]:
    """Trace ``cases`` in one subprocess (one framework import for all of them), on this
    machine, or with ``cpu`` on that emulated aarch64 CPU model (tracer.emulation: the
    framework's own aarch64 wheels under QEMU user mode).

    Cases whose ``layers`` include "native" are sampled with py-spy (``pyspy``, or
    :func:`find_pyspy`) after all cases ran, with the framework's native env set for
    the whole subprocess.

    ``kind="gpu-evidence"`` asks the probe for each case's derived GPU evidence
    instead (tracer.collect.gpu_evidence; run on this machine's CPU): the traces are
    written as ``SLUG-gpu-evidence.json``, beside the CPU traces of a survey.

    Errors that concern the whole run (no environment, no device, crash, hang) raise
    ProbeFailed; a single case that fails comes back as a CaseResult with ``error``.
    """
    python = [str(envs.python_for(fw))] if not cpu else []
    if cpu:  # nothing is timed under emulation: the framework's own count (frameworks.yaml aarch64.warmup)
        warmup = min(warmup, fw.aarch64.warmup if fw.aarch64 is not None else 0)
    out_dir = Path(out_dir).resolve()  # the probe runs in a temporary working directory
    out_dir.mkdir(parents=True, exist_ok=True)
    var = fw.variants.get(variant)
    with tempdirs.owned("dltrace-") as tmpdir:
        outs = [out_dir / f"{c.slug()}{'-gpu-evidence' if kind == 'gpu-evidence' else ''}.json" for c in cases]
        for p in outs:
            for stale in (p, Path(f"{p}{ERROR_SUFFIX}")):
                stale.unlink(missing_ok=True)
        wants_native = any("native" in c.layers for c in cases)
        # dltrace asks oneDNN for a perf map (it names JIT kernels in native stacks) and
        # removes it when the probe ends, unless the user asked for one themselves
        own_perfmap = wants_native and not any(k in os.environ for k in PERFMAP_ENV)
        nat = fw.native
        request = ProbeRequest(
            framework=fw.name, import_name=fw.import_name, probe=fw.probe, device=device,
            device_select=fw.devices[device], variant=variant, variant_set=dict(var.set) if var else {},
            variant_env=dict(var.env) if var else {}, source_roots=fw.source_roots, warmup=warmup, command=command,
            native=nat.request(find_pyspy() if pyspy is None else pyspy) if wants_native else None,
            native_env=dict(nat.env) if wants_native else {},
            cases=tuple(CaseRequest(c.primitive, c.api, c.resolved_shape(), c.resolved_passes(), tuple(c.layers),
                                    str(o), c.user.to_json() if c.user else None)
                        for c, o in zip(cases, outs)), kind=kind, door=door,
        )
        (tmpdir / "request.json").write_text(request.to_json())
        wants_library = any("library" in c.layers for c in cases)
        # a share of the cores (set by a survey running probes side by side), unless the user set one
        share = {k: str(threads) for k in THREAD_ENV} if threads else {}
        env = {**share, **(PERFMAP_ENV if wants_native else {}), **(VERBOSE_ENV if wants_library else {}), **os.environ,
               **fw.env, **(nat.env if wants_native else {}), **(var.env if var else {})}
        code = code_path(tmpdir, link=not cpu)
        env["PYTHONPATH"] = os.pathsep.join([str(code), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.setdefault("PYTHONHASHSEED", "0")
        # absolute (the probe runs in another folder): the one the probe's environment names, else this one's
        env["DLTRACE_HOME"] = str(Path(env["DLTRACE_HOME"]).absolute() if env.get("DLTRACE_HOME") else envs.home())
        # what the framework leaves in the temp folder (MXNet's profiler output) goes with this one
        (tmpdir / "tmp").mkdir()
        env["TMPDIR"] = str(tmpdir / "tmp")
        # the probe kills itself if this process dies (even by SIGKILL): see harness.die_with_parent
        env["DLTRACE_PARENT_PID"] = str(os.getpid())
        if own_perfmap:  # the probe lists its own perf map too (under emulation it is not proc.pid)
            env["DLTRACE_PERFMAP_LIST"] = str(tmpdir / tempdirs.PERFMAPS)
        if cpu:
            # a user's workload is read where it is: its folder is bound at the same path
            folders = list(dict.fromkeys(Path(c.user.file).parent for c in cases if c.user is not None))
            python, extra = _emulated(fw, cpu, [tmpdir, out_dir, package_bind(code), *folders])
            env.update(extra)
        report = tmpdir / "report.txt"
        env[REPORT_ENV] = str(report)
        env[TOKEN_ENV] = token = f"{os.getpid()}-{id(cases)}-{time.monotonic_ns()}"
        if _stopping.is_set():
            raise ProbeFailed(f"{fw.name} probe not started: dltrace is stopping", "interrupted")
        read_end, write_end = os.pipe()
        try:
            proc = subprocess.Popen(
                [*python, "-m", "tracer.collect.harness", str(tmpdir / "request.json")],
                stdout=subprocess.DEVNULL, stderr=write_end, env=env, cwd=tmpdir, start_new_session=True,
            )
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        stderr = Capture(read_end)
        family = Family(proc.pid, token)
        with _live_lock:
            _live.add(proc)
        if own_perfmap:  # removed below; by the next dltrace's sweep if this one is killed first
            tempdirs.note_perfmap(tmpdir, perfmap_path(proc.pid))
        try:
            rc = _wait(proc, timeout, memory_limit(), family)
        except subprocess.TimeoutExpired:
            where = _stuck_in(proc, stderr, [c.user.file for c in cases if c.user is not None])
            _kill(proc)
            proc.wait()
            said = f"; stderr: {_tail(stderr) or '(empty)'}" if not where else ""
            raise ProbeFailed(f"{fw.name} probe timed out after {timeout:g} s{where}{said}", "timeout") from None
        except MemoryError as exc:
            _kill(proc)
            proc.wait()
            raise ProbeFailed(f"{fw.name} probe used more than {exc} of memory and was stopped "
                              f"({MEMORY_ENV} sets the bound); stderr: {_tail(stderr) or '(empty)'}",
                              "crashed") from None
        except BaseException:  # Ctrl-C, SIGTERM: the probe must not outlive dltrace
            _kill(proc)
            proc.wait()
            raise
        finally:
            family.kill()  # what the probe started ends with it, however it ended
            stderr.close()
            with _live_lock:
                _live.discard(proc)
            if own_perfmap:
                Path(perfmap_path(proc.pid)).unlink(missing_ok=True)
        if _stopping.is_set():
            raise ProbeFailed(f"{fw.name} probe stopped: dltrace was interrupted", "interrupted")
        _check_exit(f"{fw.name} probe ({device}, {variant})", rc, cases, stderr, _notes(report))
    return [_result(spec, out) for spec, out in zip(cases, outs)]


#: The most memory a probe's processes may hold together, in GiB (default: three
#: quarters of this machine's): a workload that allocates without bound is stopped
#: with a line, before the kernel's out-of-memory killer picks a process of its own.
MEMORY_ENV = "DLTRACE_PROBE_MEMORY_GB"
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def memory_limit() -> int:
    """The bound in bytes (MEMORY_ENV, else 3/4 of the machine's memory; 0: none known)."""
    try:
        return int(float(os.environ[MEMORY_ENV]) * (1 << 30))
    except (KeyError, ValueError):
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * _PAGE * 3 // 4)
    except (ValueError, OSError, AttributeError):
        return 0


def _stuck_in(proc: subprocess.Popen[bytes], stderr: Capture, files: list[str]) -> str:
    """Where a probe running a user's workload is stuck, as ", stuck in FILE:LINE" (its
    Python stack, which the harness writes on SIGUSR1), or ""."""
    if not files:
        return ""
    try:
        os.kill(proc.pid, signal.SIGUSR1)
        proc.wait(timeout=2)
    except (OSError, subprocess.TimeoutExpired):
        pass
    for line in stderr.text()[-65536:].splitlines():  # faulthandler writes the innermost frame first
        found = re.match(r'\s*File "(.+)", line (\d+)', line)
        if found and found.group(1) in files:
            return f", stuck in {found.group(1)}:{found.group(2)}"
    return ""


#: What dltrace keeps of a probe's standard error, in bytes: its first and its last
#: half, what lies between dropped and counted. It is read from a pipe, so the bound
#: holds for whatever writes to the probe's fd 2: Python's sys.stderr and
#: sys.__stderr__, os.write(2, ...), C code, the workload's own child processes.
STDERR_BOUND = 1 << 20


class Capture:
    """A probe's standard error, read from its pipe by a thread and kept within
    STDERR_BOUND (a file would grow with whatever the workload writes, to a full disk)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.head, self.tail, self.dropped = fd, bytearray(), bytearray(), 0
        self._lock, self._done = threading.Lock(), threading.Event()
        self._thread = threading.Thread(target=self._pump, name="dltrace-probe-stderr", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while True:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if not ready:
                if self._done.is_set():
                    return
                continue
            try:
                data = os.read(self.fd, 1 << 16)
            except OSError:
                return
            if not data:
                return
            self.feed(data)

    def feed(self, data: bytes) -> None:
        """Keep ``data``'s share: the head fills first, then the tail rolls."""
        half = STDERR_BOUND // 2
        with self._lock:
            room = max(half - len(self.head), 0)
            self.head += data[:room]
            self.tail += data[room:]
            over = len(self.tail) - half
            if over > 0:
                del self.tail[:over]
                self.dropped += over

    def text(self) -> str:
        with self._lock:
            cut = f"\n[dltrace: {self.dropped} bytes of the probe's output dropped here]\n" if self.dropped else ""
            return (bytes(self.head).decode("utf-8", "replace") + cut + bytes(self.tail).decode("utf-8", "replace"))

    def close(self) -> None:
        """Read what is left (the probe and its children are gone: the pipe ends), then
        stop, waiting at most a few seconds for a writer that is somehow still there."""
        self._done.set()
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            os.close(self.fd)


def _processes() -> dict[int, tuple[int, int, int]]:
    """pid -> (parent pid, start time, resident bytes) of every process in /proc that
    has not ended (a zombie is left out)."""
    found: dict[int, tuple[int, int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            if fields[0] == b"Z":  # ended, its parent not told yet: nothing left to count or kill
                continue
            # after the command: state ppid pgrp ...; starttime is the 22nd field, rss the 24th
            found[int(entry.name)] = (int(fields[1]), int(fields[19]), int(fields[21]) * _PAGE)
        except (OSError, IndexError, ValueError):
            continue
    return found


class Family:
    """A probe and every process it started, its children in a session of their own
    and their orphans included: what the probe's process group alone would miss.
    Each :meth:`scan` (the runner polls every half second) adds the processes that
    descend from one already seen (a pid counts with its start time, so a reused pid is
    not taken for it); :meth:`kill` also finds, by the token in their environment, the
    ones started and orphaned between two scans."""

    def __init__(self, pid: int, token: str) -> None:
        self.pid, self.token = pid, token
        self.seen: dict[int, int] = {}
        procs = _processes()
        if pid in procs:
            self.seen[pid] = procs[pid][1]

    def _members(self, procs: dict[int, tuple[int, int, int]]) -> set[int]:
        alive = {p for p, start in self.seen.items() if p in procs and procs[p][1] == start}
        kids: dict[int, list[int]] = {}
        for p, (ppid, _, _) in procs.items():
            kids.setdefault(ppid, []).append(p)
        todo, members = list(alive), set(alive)
        while todo:
            for kid in kids.get(todo.pop(), []):
                if kid not in members:
                    members.add(kid)
                    todo.append(kid)
        for p in members:
            self.seen.setdefault(p, procs[p][1])
        return members

    def scan(self) -> int:
        """The resident bytes of the family now (the memory bound counts them all)."""
        procs = _processes()
        return sum(procs[p][2] for p in self._members(procs))

    def _marked(self, procs: dict[int, tuple[int, int, int]]) -> set[int]:
        mark = f"{TOKEN_ENV}={self.token}".encode()
        found = set()
        for p in procs:
            try:
                with open(f"/proc/{p}/environ", "rb") as fh:
                    if mark in fh.read().split(b"\0"):
                        found.add(p)
            except OSError:
                continue
        return found

    def kill(self) -> None:
        """SIGKILL every member still running, the probe's own pid aside (its Popen
        reaps it), a few rounds: one may fork while the others die."""
        for _ in range(5):
            procs = _processes()
            for p in self._marked(procs):
                self.seen.setdefault(p, procs[p][1])
            left = self._members(procs) - {self.pid, os.getpid()}
            if not left:
                return
            for p in left:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.05)


def _wait(proc: subprocess.Popen[bytes], timeout: float, limit: int, family: Family) -> int:
    """``proc``'s exit status; TimeoutExpired after ``timeout`` s, MemoryError (its
    text the bound) once it and every process it started hold more than ``limit`` bytes."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            return proc.wait(timeout=max(min(left, 0.5), 0.01))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise
        resident = family.scan()
        if limit and resident > limit:
            raise MemoryError(f"{limit / (1 << 30):.1f} GiB")


#: The file the harness notes its progress in (tracer.collect.harness.note), by its
#: path each time: what it did reaches dltrace even when the workload closed fds 1 and 2.
REPORT_ENV = "DLTRACE_REPORT"
#: In the probe's environment, inherited by what it starts: how Family finds them.
TOKEN_ENV = "DLTRACE_PROBE_TOKEN"


def _notes(path: Path) -> list[str]:
    """The harness's notes (one per line), bounded: the workload may write there too."""
    try:
        with open(path, "rb") as fh:
            return fh.read(1 << 20).decode("utf-8", "replace").splitlines()
    except OSError:
        return []


def _exit_words(rc: int) -> str:
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.valid_signals() else str(-rc)
        return f"crashed with signal {name} (exit {rc})"
    return f"failed with exit status {rc}" if rc else "ended early with exit status 0"


def _during(cases: list[CaseSpec], notes: list[str]) -> str:
    """What the probe was doing when it ended, from the harness's notes: the case (a
    workload by its file's name) or the native capture, whose layer was then cut."""
    started = [int(n.split()[1]) for n in notes if n.startswith("case ") and n.split()[1:2] and
               n.split()[1].isdigit()]
    if "native" in notes:
        asked = [c for c in cases if "native" in c.layers]
        who = ", ".join(f"workload {Path(c.user.file).name}" if c.user else c.primitive for c in asked)
        return f" during the native capture ({who}): the native layer was cut"
    if not started or started[-1] >= len(cases):
        return ""
    spec = cases[started[-1]]
    if spec.user is not None:
        return f" while running workload {Path(spec.user.file).name}"
    return f" while tracing {spec.primitive} ({spec.api})"


def _check_exit(what: str, rc: int, cases: list[CaseSpec], stderr: Capture, notes: list[str]) -> None:
    """The probe's end as a ProbeFailed unless the harness got to its own end: a probe
    that stopped early (a signal, an exit status, or 0 from a workload's os._exit) left
    a case or a layer cut, and the line says which, with its exit."""
    said = [n[len("error "):] for n in notes if n.startswith("error ")]
    last = said[-1] if said else _tail(stderr, 1)
    started = any(n.startswith("case ") for n in notes)  # after that, an exit status is the workload's own
    if rc == Exit.NO_DEVICE and not started:
        raise ProbeFailed(f"{what}: {last}", "no-device")
    if rc == Exit.IMPORT and not started:
        raise ProbeFailed(f"{what}: {last}", "import")
    if rc == 0 and "end" in notes:
        return
    during = _during(cases, notes)
    stderr_text = "; ".join(said[-2:]) or _tail(stderr) or "(empty)"
    # a case that started and did not finish: a crash of that case, the others go on
    kind: FailureKind = "crashed" if rc < 0 or during else "failed"
    raise ProbeFailed(f"{what} {_exit_words(rc)}{during}; stderr: {stderr_text}", kind)


def _result(spec: CaseSpec, out: Path) -> CaseResult:
    """What the probe left for one case: its trace, read back to be sure it is one,
    or the error it wrote instead."""
    err = Path(f"{out}{ERROR_SUFFIX}")
    if err.exists():
        record = CaseError.from_json(err.read_text(errors="replace"))
        err.unlink(missing_ok=True)
        return CaseResult(spec, None, record.error, record.traceback)
    if not out.exists():
        return CaseResult(spec, None, "the probe wrote no trace")
    try:
        trace = load(out)
    except TraceFormatError as exc:
        out.unlink(missing_ok=True)
        return CaseResult(spec, None, f"the probe wrote an unreadable trace: {exc}")
    spent = trace.meta.get("spent_s")
    return CaseResult(spec, out, spent={k: float(v) for k, v in spent.items() if isinstance(v, (int, float))}
                      if isinstance(spent, dict) else {})


def probe_one(fw: Framework, spec: CaseSpec, device: str = "cpu", variant: str = "default",
              timeout: float = DEFAULT_TIMEOUT, out: Path | None = None, command: str = "",
              pyspy: str | None = None, cpu: str = "", door: str = "eager") -> Trace:
    """Trace a single case (``door`` "compiled": under torch.compile); its failure is a ProbeFailed."""
    with tempdirs.owned("dltrace-out-") as tmp:
        (res,) = run_probe(fw, [spec], tmp, device, variant, timeout, command=command, pyspy=pyspy, cpu=cpu,
                           door=door)
        if res.error:
            raise ProbeFailed(f"{fw.name} {spec.primitive} ({spec.api}, {device}, {variant}): {res.error}",
                              detail=res.detail)
        try:
            trace = res.load()
        except TraceFormatError as exc:
            raise ProbeFailed(str(exc)) from None
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            save(trace, out)
        return trace
