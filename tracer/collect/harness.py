"""Runs inside a framework's environment (``python -m tracer.collect.harness REQUEST``):
imports the probe, applies the variant, traces each case and writes one trace file
per case. Layers: "python" always; "op" through the probe's ``record_ops`` hook;
"native" through py-spy, for all cases that ask for it in one session at the end
(see tracer.collect.sampler), after which their traces are written again.
The tool talks to it only through files (the request, tracer.contract.ProbeRequest;
the traces) and the exit status (tracer.contract.Exit).
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import faulthandler
import functools
import gc
import importlib
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, Callable, Iterator

from tracer import __version__, machine
from tracer.collect import costs, library, sampler
from tracer.collect.attribution import merge_stats, merge_trees
from tracer.probes.cases import case_passes, make_case
from tracer.collect.collector import CollectorError, python_tracer
from tracer.collect.gpu_evidence import derive_case
from tracer.collect.library import StdoutLog
from tracer.collect.maps import perfmap_path
from tracer.collect.pytrace import PythonTracer
from tracer.probes.user_workload import WorkloadFailed
from tracer.contract import (EMULATED_ENV, ERROR_SUFFIX, LAYERS, MODELS, THREAD_ENV, CaseError, CaseRequest,
                             CompiledDoor, DeviceCheck, DeviceInfo, DispatchTable, EmulatedCpu, Exit, GpuEvidence,
                             LibraryVerbose, NativeRequest, OpHooks, OpRecorder, Probe, ProbeRequest, UserWorkload,
                             leave)
from tracer.trace import Frame, Node, Run, Trace, save
from tracer.trace_meta import native_not_finished

if TYPE_CHECKING:  # the annotations only
    from tracer.probes.base import Case

#: What a trace that asked for native stacks says until they are added: if the probe
#: process dies during the capture, the trace already on disk says so.
NATIVE_PENDING = native_not_finished("the probe process ended during it")
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
#: Each pass's native stacks are sampled in this many independent windows (kept as the
#: layer's replicas): the diff accepts a sampled split only where every one shows it.
REPLICAS = 2
#: ...and each replica in this many slices, taken in turn with the other replica's
#: (A B A B ...): a stall of the whole process (py-spy stops it while it reads a
#: large library's symbols, another job takes the cores) then costs each replica a
#: slice, not one replica all of its samples (measured: TensorFlow's conv forward
#: sampled as two halves, one after the other, once kept 9 samples in one and 75
#: in the other, and its split went unreplicated).
ROUNDS = 3


def die_with_parent() -> None:
    """Be killed when the dltrace process that started this probe dies, however it
    dies (SIGKILL included): a probe runs in its own process group, so nothing else
    would stop it, and its timeout is the parent's."""
    parent = os.environ.get("DLTRACE_PARENT_PID")
    if not parent:
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != parent:  # the parent died before the prctl
        os._exit(Exit.ERROR)


def adopt_orphans() -> None:
    """Become the parent of what the processes this probe starts leave orphaned (a
    workload's child that forks and exits, one in a session of its own): they stay in
    this probe's process tree, where the runner counts their memory and ends them with
    the probe (tracer.runner.Family), instead of going to init."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


#: The largest file a probe process writes (a trace, the library layer's log of fd 1, what a
#: workload writes itself), in MiB (FILE_ENV sets another): past it a write fails (EFBIG)
#: and the file stops growing, so a workload printing from C in a loop cannot fill the
#: disk. A survey's largest trace is tens of MB.
MAX_FILE_MB = 2048
FILE_ENV = "DLTRACE_PROBE_FILE_MB"


def bound_files() -> None:
    """Every file this process and its children write is at most MAX_FILE_MB: the kernel
    refuses the write past it (SIGXFSZ ignored, so that the write fails rather than the
    process dying; a bounded log is still read)."""
    try:
        limit = int(float(os.environ.get(FILE_ENV) or MAX_FILE_MB) * (1 << 20))
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft == resource.RLIM_INFINITY or soft > limit:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    except (OSError, ValueError):
        pass


def note(line: str) -> None:
    """A line in the runner's report file (DLTRACE_REPORT, tracer.runner._notes), the
    file opened by its path each time: what this probe did and said reaches dltrace
    even when the workload closed fds 1 and 2, or this process ends without a word."""
    path = os.environ.get("DLTRACE_REPORT")
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line.replace("\n", " ") + "\n")
    except OSError:
        pass


def say(text: str, error: bool = False) -> None:
    """``text`` on standard error (for the user's eyes, and --verbose), and an error in
    the report file too; a standard error the workload closed or replaced is no error
    of the probe's."""
    if error:
        note(f"error {text}")
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


class TracerRemoved(Exception):
    """The traced step removed the Python tracer (sys.settrace(None), sys.setprofile,
    sys.monitoring): the Python layer of that step is cut, and no trace claims it."""


def _hooks() -> tuple[Any, ...]:
    """The trace and profile functions and dltrace's sys.monitoring events, as now."""
    mon = getattr(sys, "monitoring", None)
    ours: tuple[Any, ...] = ()
    if mon is not None:
        ours = tuple((i, mon.get_events(i)) for i in range(6) if mon.get_tool(i) == "dltrace")
    return sys.gettrace(), sys.getprofile(), ours


def watched(step: Callable[[], Any], what: str) -> Callable[[], Any]:
    """``step`` that raises TracerRemoved when the hooks it started under are not the
    ones it ends under (it runs inside the tracer's recording)."""
    def run() -> Any:
        before = _hooks()
        result = step()
        if _hooks() != before:
            raise TracerRemoved(f"{what} removed dltrace's Python tracer (sys.settrace, sys.setprofile or "
                                "sys.monitoring): its Python layer is cut, so no trace of it is kept")
        return result

    return run


def set_dotted(dotted: str, value: Any) -> Any:
    """Apply a variant's ``set`` entry, e.g. torch.backends.mkldnn.enabled = False;
    returns the value read back, so the trace shows that the switch took effect."""
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:-1], start=1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(".".join(parts[: i + 1]))
    setattr(obj, parts[-1], value)
    return getattr(obj, parts[-1])


class Spent:
    """Where a case's seconds went, by phase (its trace's meta ``spent_s``, which a survey
    adds up per job in survey.json): ``setup`` (building the case: the model, its inputs),
    ``python`` (the traced steps and their timing pairs), ``warm-up``, ``op`` and ``library``
    (each layer's step, the op layer's pairs included), ``compiled`` (a compiled door's record
    beside the eager one), ``other`` (the rest of the case: dispatch tables, the trace's meta);
    and, added by :func:`main`, ``import`` (the framework's, on a process's first case) and
    ``native`` (the capture's seconds, shared equally by the cases it sampled)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - t0

    def total(self, seconds: float) -> dict[str, float]:
        """The phases, with the rest of ``seconds`` as ``other``; rounded to milliseconds."""
        out = {k: round(v, 3) for k, v in self.seconds.items()}
        out["other"] = round(max(0.0, seconds - sum(self.seconds.values())), 3)
        return out


class _Forwards:
    """The state of the forward just run, until a backward takes it.

    A backward pass runs on a fresh forward's state, and a layer's recorded forward,
    just run, is one: running another before each backward was a second forward per
    layer. Only a forward run as the user's code runs it is kept (the Python layer's, the
    library log's, an untraced one); one run inside a framework's op recorder is not
    (JAX's may run it on its own terms), and clears what was kept, so a backward
    always runs on the forward run just before it. The warm passes are recorded layer
    by layer (the Python layer's forward and backward, then the op layer's, then the
    library log's), so only the op layer's backward needs a forward of its own: six
    forwards a case where there were nine (a ResNet-50 forward is 4 s under QEMU)."""

    def __init__(self, case: Case):
        self.case = case
        self.state: list[Any] = []

    def keep(self, state: Any) -> Any:
        self.state[:] = [state]
        return state

    def clear(self) -> None:
        self.state.clear()

    def take(self) -> Any:
        """The kept state (once), else a fresh forward's."""
        return self.state.pop() if self.state else self.case.forward()


def _step(forwards: _Forwards, pass_: str, keep: bool) -> Callable[[], Any]:
    """Exactly the step the Python layer traces: the forward call (its state kept for
    the backward where ``keep``), or the backward call on the forward's state (taken
    here, before the step)."""
    case = forwards.case
    if pass_ == "forward":
        def run() -> Any:
            out = case.forward()
            forwards.keep(out) if keep else forwards.clear()
            return out

        return run
    state = forwards.take()
    return lambda: case.backward(state)


#: Pairs of untraced and profiled steps an op layer's cost is read from (the first profiled
#: step is the recorded one; each more is a whole record, its processing included, untimed):
#: four ABBA blocks (tracer.collect.costs), so that the step after a record's processing is
#: as often an untraced one as a profiled one, and the spread is the quartiles of four
#: blocks, not the two values of two (which made two runs' spreads miss each other).
OP_PAIRS = 8


def _profiled(probe: OpRecorder, forwards: _Forwards, pass_: str) -> tuple[Any, list[float]]:
    """One op-level record of a fresh step, and the seconds of the step itself under the
    profiler (what the profiler's start, its stop and dltrace's reading of its events
    take is outside: that is processing, not what recording costs the step)."""
    case = forwards.case
    run = _step(forwards, pass_, keep=False)
    steps: list[float] = []

    def timed() -> Any:
        t0 = time.perf_counter()
        out = run()
        case.sync()
        steps.append(time.perf_counter() - t0)
        return out

    return probe.record_ops(case, pass_, timed), steps


def _op_layer(probe: OpRecorder, forwards: _Forwards, pass_: str, label: str,
              untraced: Callable[[], float] | None = None) -> tuple[Node | None, dict[str, Any]]:
    """The probe's op-level record of one warm step, hung under a root like the
    Python layer's; (None, {"op_error": ...}) when the hook fails. With ``untraced``
    (a user's workload, whose costs its outputs show): its cost, the step under the
    profiler against the untraced step, in pairs (tracer.collect.costs), on a CPU path
    (on the stand-in, the device computes in Python: no cost to speak of)."""
    case = forwards.case
    t0 = time.perf_counter()
    try:
        rec, steps = _profiled(probe, forwards, pass_)
    except Exception as exc:  # noqa: BLE001 - the other layers are still worth writing
        return None, {"op_error": f"{type(exc).__name__}: {exc}"}
    case.sync()
    root = Node(Frame("root", "", label), 1, sum(n.time_ns for n in rec.ops), children=list(rec.ops))
    info = {"source": rec.source, "seconds": round(time.perf_counter() - t0, 4), **rec.info}
    if untraced is not None and len(steps) == 1 and case.info.get("standin") is None:
        def again() -> float:
            more = _profiled(probe, forwards, pass_)[1]
            if len(more) != 1:
                raise _NotTimed
            return more[0]

        try:
            cost = costs.paired(untraced, again, case.sync, first=steps[0], least=OP_PAIRS, most=OP_PAIRS)
        except _NotTimed:  # a record read from programs, not from a run of the step (JAX's, once read): no cost
            return root, info
        info.update(step_s=cost["traced_s"], **{k: cost[k] for k in ("overhead", "overhead_spread") if k in cost})
    return root, info


class _NotTimed(Exception):
    """A record that ran no step of its own to time."""


def _library_layer(log: StdoutLog, forwards: _Forwards, pass_: str, label: str,
                   probe: Probe | None = None) -> tuple[Node, dict[str, Any]]:
    """What the vendor libraries reported of one warm step (see tracer.collect.library),
    told apart per op where the probe can call back after each op (OpHooks)."""
    case = forwards.case
    run = _step(forwards, pass_, keep=True)

    def step() -> None:
        run()
        case.sync()

    info: dict[str, Any] = {"source": "vendor verbose logs"}
    if isinstance(probe, OpHooks):
        calls, info["per_op"] = log.per_op(step, probe.op_hooks)
    else:
        calls = log.between(step)
    info["calls"] = len(calls.calls)
    if calls.unreadable:
        info["unreadable_lines"] = calls.unreadable
    return library.tree(calls, label), info


def _machine(req: ProbeRequest, probe: Probe) -> dict[str, Any]:
    """Where the probe ran: this machine, or the emulated CPU the runner chose (its
    /proc/cpuinfo is the model's; the trace must say it was emulated), and on a GPU
    the card, its driver and the runtime the framework drives it with (what a
    recorded GPU trace needs to say where it came from)."""
    m = machine.describe()
    if req.device == "gpu" and isinstance(probe, DeviceInfo):
        try:
            info = probe.device_info(req.device_select)
        except Exception as exc:  # noqa: BLE001 - the trace is worth writing without it
            info = {"gpu": f"unknown ({type(exc).__name__}: {exc})"[:200]}
        m.update({"gpu": str(info.get("gpu", "")), "gpu_runtime": str(info.get("runtime", "")),
                  "gpu_driver": machine.gpu_driver()})
    emulated = os.environ.get(EMULATED_ENV)
    if emulated:
        cpu = EmulatedCpu.from_json(emulated)
        m["cpu"] = f"{cpu.model} (emulated)"
        m["emulated"] = asdict(cpu)
    return m


def _trace_case(req: ProbeRequest, case_req: CaseRequest, probe: Probe, version: str, applied: dict[str, Any],
                tracer: PythonTracer, log: StdoutLog | None) -> tuple[Trace, Any]:
    """``tracer`` is shared by the cases of one request, so that each function is
    classified once per process, not once per case."""
    began = time.perf_counter()
    spent = Spent()
    shape = tuple(case_req.shape)
    user = UserWorkload.from_json(case_req.workload)
    with spent("setup"):
        case = make_case(probe, case_req.primitive, case_req.api, req.device_select, shape, user)
        passes = case_passes(case, case_req.passes)
        if req.door == "compiled":  # the passes run under torch.compile from here on (tracer.probes.torch_compiled)
            if not isinstance(probe, CompiledDoor):
                raise RuntimeError(f"{req.framework}'s probe has no compiled door (it lacks compile_case)")
            probe.compile_case(case, passes)
    layers = case_req.layers
    runs: list[Run] = []
    emulated = bool(os.environ.get(EMULATED_ENV))

    who = f"{os.path.basename(user.file)}: running {{}}()" if user else f"{case_req.primitive}'s {{}} pass"

    forwards = _Forwards(case)

    def traced(pass_: str) -> tuple[Node, float]:
        """One traced step: (tree, seconds). Backward traces only the backward call."""
        label = f"{case_req.primitive}.{pass_}"
        if pass_ == "forward":
            t0 = time.perf_counter()
            tree, out = tracer.record(watched(case.forward, who.format(pass_)), label)
            secs = time.perf_counter() - t0
            forwards.keep(out)
            return tree, secs
        state = forwards.take()
        t0 = time.perf_counter()
        tree, _ = tracer.record(watched(lambda: case.backward(state), who.format(pass_)), label)
        return tree, time.perf_counter() - t0

    def untraced(pass_: str) -> float:
        if pass_ == "forward":
            t0 = time.perf_counter()
            out = case.forward()
            secs = time.perf_counter() - t0
            forwards.keep(out)
            return secs
        state = forwards.take()
        t0 = time.perf_counter()
        case.backward(state)
        return time.perf_counter() - t0

    # Cold: the very first call of each pass, with its one-time initialisation.
    for pass_ in passes:
        with spent("python"):
            tree, secs = traced(pass_)
            case.sync()
        runs.append(Run(pass_, "cold", {"python": tree}, {"seconds": secs}))
    # The warm call comes after req.warmup more steps: the timings' three, and under
    # emulation, where nothing is timed, the framework's own count, usually none: the cold
    # call is the warm-up there (tracer.runner, frameworks.yaml aarch64.warmup).
    with spent("warm-up"):
        forwards.clear()
        for _ in range(req.warmup):
            case.backward(case.forward()) if "backward" in passes else case.forward()
            case.sync()
    # layer by layer, each layer's forward then its backward on that forward's state
    warm: list[Run] = []
    for pass_ in passes:
        with spent("python"):
            tree, secs = traced(pass_)
            case.sync()
            # under emulation nothing is timed: QEMU's clock says nothing of the chip
            stats: dict[str, Any] = {} if emulated else costs.paired(lambda: untraced(pass_),
                                                                     lambda: traced(pass_)[1], case.sync, first=secs)
        warm.append(Run(pass_, "warm", {"python": tree}, stats))
    if "op" in layers and isinstance(probe, OpRecorder):
        for run in warm:
            with spent("op"):
                timed = user is not None and not emulated  # a workload's op cost, against its untraced step
                ops, info = _op_layer(probe, forwards, run.pass_, f"{case_req.primitive}.{run.pass_}",
                                      functools.partial(untraced, run.pass_) if timed else None)
            if ops is None:
                run.stats.update(info)
            else:
                run.layers["op"] = ops
                run.stats.setdefault("layers", {})["op"] = info
    if "library" in layers and log is not None:
        for run in warm:
            with spent("library"):
                run.layers["library"], info = _library_layer(log, forwards, run.pass_,
                                                             f"{case_req.primitive}.{run.pass_}", probe)
            run.stats.setdefault("layers", {})["library"] = info
    forwards.clear()
    runs.extend(warm)

    meta: dict[str, Any] = {
        "framework": req.framework,
        "framework_version": version,
        "primitive": case_req.primitive,
        "api": case_req.api,
        "device": req.device,
        "variant": req.variant,
        "variant_env": req.variant_env,
        "variant_set": applied,
        "shape": list(shape),
        "passes": passes,
        "source_roots": req.source_roots,
        "machine": _machine(req, probe),
        "tool": "dltrace",
        "tool_version": __version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": req.command,
        "layers_requested": [layer for layer in LAYERS if layer in layers],
        "collector": dict(tracer.collector),  # which Python-level collector ran (C core or its fallback)
    }
    if req.door == "compiled":  # an eager trace says nothing of doors (its format is as it was)
        meta["door"] = req.door
    if req.door == "both" and isinstance(probe, CompiledDoor) and (user is not None or case_req.primitive in MODELS):
        with spent("compiled"):
            case.info["compiled"] = _compiled_beside(probe, case_req, shape, user, passes)
    if "emulated" in meta["machine"]:  # the runner's account of the emulated CPU, read by _machine
        meta["emulated"] = meta["machine"]["emulated"]
    if req.native_env:  # set for this whole process (before the import), so every case says so
        meta["native_env"] = req.native_env
    threads = {k: os.environ[k] for k in THREAD_ENV if k in os.environ}
    if threads:  # the thread counts its timings ran under (a survey's share of the cores)
        meta["thread_env"] = threads
    if isinstance(probe, DispatchTable) and any("op" in r.layers for r in runs):
        names = [n.frame.name for r in runs for _, n in r.layers.get("op", Node(Frame("root", "", ""))).walk()
                 if n.frame.kind == "op"]
        try:
            meta["dispatch"] = probe.dispatch_table(names)
        except Exception as exc:  # noqa: BLE001 - the trace is worth writing without it
            meta["dispatch"] = {"error": f"{type(exc).__name__}: {exc}"}
    if "library" in layers and log is not None:  # what the libraries said of themselves
        blas = library.openblas()
        meta["library"] = {**log.log.info, **({"OpenBLAS": blas} if blas else {})}
    meta.update(case.info)
    meta["spent_s"] = spent.total(time.perf_counter() - began)
    used = {(n.frame.file, n.frame.line) for r in runs for tree in r.layers.values() for _, n in tree.walk()
            if n.frame.kind == "python"}
    return Trace(meta, runs, {k: v for k, v in tracer.sources.items() if k in used}), case


def _compiled_beside(probe: CompiledDoor, case_req: CaseRequest, shape: tuple[int, ...], user: UserWorkload | None,
                     passes: tuple[str, ...]) -> dict[str, Any]:
    """The compiled door's record of a whole step, beside its eager run (a survey's
    stand-in job, ``door`` "both"): the same step built again on the CPU and run under
    torch.compile with the recording backend (tracer.probes.torch_compiled). A failure is
    the record's ``error``, one line: the eager trace is still written."""
    try:
        other = make_case(probe, case_req.primitive, case_req.api, "cpu", shape, user)  # type: ignore[arg-type]
        probe.compile_case(other, passes)
        return dict(other.info["compiled"])
    except Exception as exc:  # noqa: BLE001 - the eager run's trace is worth writing without it
        text = (str(exc).strip().splitlines() or [""])[0][:300]
        return {"error": f"{type(exc).__name__}: {text}", "graphs": [], "ops": {}, "graph_breaks": []}


def _native_layers(req: ProbeRequest, pending: list[tuple[CaseRequest, Trace, Any]]) -> None:
    """Sample every pending case's warm passes in one py-spy session and add the
    native trees to their traces; if py-spy cannot run, each trace says why."""
    cfg = req.native or NativeRequest()
    jobs: list[sampler.Job] = []
    where: dict[tuple[str, ...], tuple[Trace, str]] = {}  # a pass's markers -> its trace and pass
    for ci, (case_req, trace, case) in enumerate(pending):
        for pass_ in case_req.passes:
            if pass_ == "forward":
                # mypy cannot type a lambda with a default argument (python/mypy#15459)
                step = sampler.Step(lambda _, c=case: c.forward(), None, case.sync)  # type: ignore[misc]
            else:
                step = sampler.Step(case.backward, case.forward, case.sync)
            # two independent halves: a difference that chance made shows in one at most
            markers = [f"_dltrace_native_{ci}_{pass_}_{h}" for h in range(REPLICAS)]
            root = Frame("root", "", f"{case_req.primitive}.{pass_}")
            jobs += [sampler.Job(m, step, root, cfg.seconds / REPLICAS / ROUNDS)
                     for _ in range(ROUNDS) for m in markers]
            where[tuple(markers)] = (trace, pass_)
    error: str | None = None
    results: dict[str, tuple[Node, dict[str, Any]]] = {}
    session: dict[str, Any] = {}
    workdir = tempfile.mkdtemp(prefix="dltrace-native-")
    try:
        results, session = sampler.capture(cfg.pyspy, jobs, workdir, rate=cfg.rate,
                                          idle=cfg.idle, prime=cfg.prime,
                                          perfmap=perfmap_path())
    except sampler.NativeUnavailable as exc:
        error = str(exc)
    except Exception as exc:  # noqa: BLE001 - the traces without native stacks are still written
        error = f"native capture failed: {type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for _, trace, _ in pending:
        trace.set_meta("native", {**session, "seconds": cfg.seconds} if error is None else {"error": error})
    for names, (trace, pass_) in where.items():
        run = trace.run(pass_, "warm")
        if run is None:
            continue
        if error is not None:
            run.stats["native_error"] = error
        else:
            halves = [results[m] for m in names]
            run.layers["native"] = merge_trees([tree for tree, _ in halves])
            run.replicas["native"] = [tree for tree, _ in halves]
            run.stats.setdefault("layers", {})["native"] = merge_stats([stats for _, stats in halves])


def _import_probe(name: str) -> object:
    """The probe module. The framework's import ran in between and may have taken
    minutes under emulation; if the probe's package is then not found, the finders'
    cached folder listings are dropped and the import tried once more (what
    importlib.invalidate_caches is for) before it counts as missing."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if not exc.name or not name.startswith(exc.name):
            raise
        importlib.invalidate_caches()
        return importlib.import_module(name)


def _list_own_perfmap() -> None:
    """Add this process's perf map to the list dltrace removes (its runner's folder,
    DLTRACE_PERFMAP_LIST): under emulation this process is not the one dltrace started."""
    listing = os.environ.get("DLTRACE_PERFMAP_LIST")
    if listing:
        try:
            with open(listing, "a", encoding="utf-8") as fh:
                fh.write(f"/tmp/perf-{os.getpid()}.map\n")
        except OSError:
            pass


def main(argv: list[str]) -> int:
    began = time.perf_counter()
    die_with_parent()
    adopt_orphans()
    bound_files()
    # where a case is stuck, when the runner asks before it stops one that timed out
    faulthandler.register(signal.SIGUSR1, file=sys.stderr.fileno() if hasattr(sys.stderr, "fileno") else sys.stderr,
                          all_threads=False)
    _list_own_perfmap()
    with open(argv[0]) as fh:
        req = ProbeRequest.from_json(fh.read())
    try:
        fw = importlib.import_module(req.import_name)
        applied = {dotted: set_dotted(dotted, value) for dotted, value in req.variant_set.items()}
        probe = _import_probe(req.probe)
    except Exception as exc:  # noqa: BLE001 - reported as one line to the tool
        where = f" (tracer from {', '.join(getattr(sys.modules.get('tracer'), '__path__', []))})" \
            if isinstance(exc, ModuleNotFoundError) else ""
        say(f"cannot import {req.import_name} / {req.probe}: {type(exc).__name__}: {exc}{where}", error=True)
        return Exit.IMPORT
    if not isinstance(probe, Probe):
        say(f"{req.probe} is not a probe: it lacks gpu_available() or make_case() (tracer.contract.Probe)",
            error=True)
        return Exit.IMPORT
    if req.kind == "gpu-evidence":
        return _gpu_evidence(req, probe, str(getattr(fw, "__version__", "unknown")))
    available = probe.device_available(req.device_select) if isinstance(probe, DeviceCheck) else probe.gpu_available()
    if req.device != "cpu" and not available:
        say(f"no {req.device.upper()} visible to {req.framework} on this machine", error=True)
        return Exit.NO_DEVICE
    version = str(getattr(fw, "__version__", "unknown"))
    # What the imports made lives as long as the process: kept out of the cyclic GC's
    # walks, which the cases' call trees would otherwise make over all of it.
    gc.freeze()
    pending: list[tuple[CaseRequest, Trace, Any]] = []  # cases that want native stacks, kept alive
    try:
        tracer = python_tracer(req.source_roots)  # the C core where it builds, else PythonTracer
    except CollectorError as exc:
        say(str(exc), error=True)
        return Exit.ERROR
    # the libraries' own reports go to fd 1: into a file while the cases run
    log = StdoutLog(os.path.join(tempfile.gettempdir(), f"dltrace-stdout-{os.getpid()}.log")) \
        if any("library" in c.layers for c in req.cases) else None
    if log is not None and isinstance(probe, LibraryVerbose):  # the logs on in the library step only
        log.switch = probe.library_verbose
        log.switch(False)
    imported = time.perf_counter() - began  # the framework's import, the probe's, the collector's
    for i, case_req in enumerate(req.cases):
        out = case_req.out
        note(f"case {i}")
        try:
            trace, case = _trace_case(req, case_req, probe, version, applied, tracer, log)
            if i == 0:  # the process's start, once: on its first case
                trace.meta["spent_s"]["import"] = round(imported, 3)
            if "native" in case_req.layers:  # until it has them: a probe that ends first leaves it said
                trace.set_meta("native", dict(NATIVE_PENDING))
            save(trace, out)
            if "native" in case_req.layers:
                pending.append((replace(case_req, passes=tuple(trace.meta["passes"])), trace, case))
        except Exception as exc:  # noqa: BLE001 - one case failing must not lose the others
            _write_error(out, exc)
        note(f"done {i}")
        say(f"done {case_req.primitive} {case_req.api}")
    if log is not None:
        log.mute()  # the sampled loops would write megabytes of lines nobody reads
    if pending:
        note("native")
        t0 = time.perf_counter()
        _native_layers(req, pending)
        share = round((time.perf_counter() - t0) / len(pending), 3)
        for case_req, trace, _ in pending:
            trace.meta["spent_s"]["native"] = share
            save(trace, case_req.out)
        say(f"done native ({len(pending)} cases)")
    note("end")
    return Exit.OK


def _gpu_evidence(req: ProbeRequest, probe: Probe, version: str) -> int:
    """A ``gpu-evidence`` request: each case's derived GPU evidence (see
    tracer.collect.gpu_evidence), run on this machine's CPU."""
    if not isinstance(probe, GpuEvidence):
        say(f"{req.probe} derives no GPU evidence: it lacks gpu_evidence() (tracer.contract.GpuEvidence)", error=True)
        return Exit.IMPORT
    for i, case_req in enumerate(req.cases):
        note(f"case {i}")
        try:
            save(derive_case(req, case_req, probe, version), case_req.out)
        except Exception as exc:  # noqa: BLE001 - one case failing must not lose the others
            _write_error(case_req.out, exc)
        note(f"done {i}")
        say(f"done {case_req.primitive} {case_req.api} (gpu evidence)")
    note("end")
    return Exit.OK


def _write_error(out: str, exc: BaseException) -> None:
    """The case's error record: a user's workload that failed says so in its own words
    (its file and line) with its own frames only; anything else, the exception."""
    if isinstance(exc, WorkloadFailed):
        record = CaseError(exc.one_line, exc.user_traceback)
    else:
        record = CaseError(f"{type(exc).__name__}: {exc}", traceback.format_exc())
    with open(out + ERROR_SUFFIX, "w") as fh:
        fh.write(record.to_json())


def run(argv: list[str]) -> int:
    """main, whose uncaught exception is also noted in the report file (its traceback
    goes to a standard error the workload may have closed)."""
    try:
        return main(argv)
    except Exception as exc:
        note(f"error {type(exc).__name__}: {str(exc)[:300]}")
        raise


if __name__ == "__main__":
    leave(run(sys.argv[1:]))
