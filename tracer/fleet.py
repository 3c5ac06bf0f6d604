"""Run a survey's jobs on a Dask distributed scheduler instead of the local pool.

Why Dask: the paths that matter live on different machines (a GPU box, an ARM
server, the x86 workstation); Dask's worker resources route each job to a worker
that declared what the job needs, so we write no scheduler of our own. A worker
runs ``survey.run_job`` into its own temporary folder and returns the files'
bytes and its own name; the submitting machine writes them atomically into the
survey folder, each trace naming the worker that recorded it (meta
``recorded_by``), so resume and reuse work as for a local survey. An ARM-audit job
runs on a native aarch64 worker where the scheduler has one (:func:`route`), on an
emulated CPU only where it has none.
"""

from __future__ import annotations

from tracer import tempdirs
import asyncio
import concurrent.futures
import ipaddress
import json
import logging
import os
import platform
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable
from urllib.parse import urlsplit

from tracer import fleet_credentials
from tracer.contract import Exit
from tracer.errors import DltraceError, UsageError
from tracer.files import ensure_file_parent, write_bytes
from tracer.gap import GAP_SUFFIX, Gap, gap_json, load_gap
from tracer.fleet_routing import SLOTS, WORKLOAD_RESOURCE, needs, resources_here, route, runnable
from tracer.registry_entries import Framework
from tracer.runner import DEFAULT_TIMEOUT
from tracer.survey import Job, SurveyEvent, case_path, run_job
from tracer.trace import TraceFormatError, load, save

if TYPE_CHECKING:  # the annotations only: distributed is imported where a fleet is used
    from distributed import Client, Future
    from distributed.security import Security

    #: what run_remote sends back: (the worker, the files it wrote by their relative path)
    _Sent = Future[tuple[dict[str, str], dict[str, bytes]]]

#: Seconds a scheduler has to answer (connect, handshake, identify itself): a closed
#: port, an HTTP server or a listener that never speaks is one line after this.
CONNECT_S = 10.0
#: Seconds of a lost scheduler before the jobs still in flight become gaps.
LOST_S = 30.0
#: What talking to a scheduler that went away raises (Dask's CommClosedError is an
#: OSError; a future the closing client cancelled, a CancelledError); anything else is a bug.
_LOST: tuple[type[BaseException], ...] = (OSError, TimeoutError, concurrent.futures.CancelledError)
#: Where the secure set-up is explained (in the project's docs).
HOW = ("docs/fleet.md: a scheduler, workers and survey each with a certificate of one CA, "
       "tls://HOST:PORT and --tls-ca-file/--tls-cert/--tls-key")


# ----------------------------------------------------------------------------- addresses and security


@dataclass(frozen=True)
class Scheduler:
    """A scheduler's address as the fleet accepts it, with the TLS files of this
    side of the connection (None on loopback without TLS)."""

    address: str
    host: str
    loopback: bool
    security: Security | None


def _loopback(host: str) -> bool:
    """Only this machine can reach the address (a literal loopback address, or localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def scheduler(address: str, role: str, ca: str | None = None, cert: str | None = None,
              key: str | None = None, trust_local_users: bool = False) -> Scheduler:
    """``address`` checked before anything connects: ``tcp://HOST:PORT`` or
    ``tls://HOST:PORT`` (UsageError otherwise). Any client that reaches a Dask scheduler
    runs code in every worker, so one that is not on a loopback address is used only
    over TLS with certificates (Dask's security: mutual TLS, each side's certificate
    signed by the CA the other trusts); without them a UsageError says how. On
    loopback the same holds where the machine has other users (each can reach a
    loopback port) unless ``trust_local_users``; a ``tls://`` loopback scheduler given
    no certificates is reached with those dltrace made for this user (``dltrace
    scheduler``). ``role``: "client" (a survey) or "worker". The TLS files are the
    options' or Dask's own settings (distributed.comm.tls.*)."""
    usage = f"scheduler address {address[:80]!r} is not tcp://HOST:PORT or tls://HOST:PORT"
    try:
        parts = urlsplit(address.strip())
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"{usage} ({exc})") from None
    host = parts.hostname or ""
    if parts.scheme not in ("tcp", "tls") or not host or not port or parts.path not in ("", "/") \
            or parts.query or parts.fragment or parts.username or parts.password:
        raise UsageError(usage)
    loopback = _loopback(host)
    if parts.scheme == "tcp":
        if not loopback:
            raise UsageError(f"scheduler {address}: not on this machine, and a fleet across machines runs only over "
                             f"TLS with certificates (whoever reaches an open scheduler runs code in every worker): "
                             f"use tls://{parts.netloc} with certificates ({HOW})")
        others = [] if trust_local_users else fleet_credentials.other_users()
        if others:
            shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            raise UsageError(f"scheduler {address}: this machine has other users ({shown}), and whoever reaches a "
                             f"plain scheduler on loopback runs code in every worker: start one with `dltrace "
                             f"scheduler` and use tls://{parts.netloc} (certificates dltrace makes for you), or say "
                             f"--trust-local-users")
        return Scheduler(address.strip(), host, True, None)
    from distributed.security import Security

    given = {"tls_ca_file": ca, f"tls_{role}_cert": cert, f"tls_{role}_key": key}
    sec = Security(require_encryption=True, **{k: v for k, v in given.items() if v})
    missing = [opt for opt, attr in (("--tls-ca-file", "tls_ca_file"), ("--tls-cert", f"tls_{role}_cert"))
               if not getattr(sec, attr)]
    if loopback and len(missing) == 2:  # nothing given on this machine: dltrace's own, if it made them
        own = fleet_credentials.existing()
        if own is None:
            raise UsageError(f"scheduler {address}: no certificates given, and dltrace has made none for a fleet on "
                             f"this machine: start the scheduler with `dltrace scheduler`, which makes them")
        return Scheduler(address.strip(), host, loopback, own.security())
    if missing:
        raise UsageError(f"scheduler {address}: TLS needs {' and '.join(missing)} (or Dask's distributed.comm.tls "
                         f"settings); {HOW}")
    for attr in ("tls_ca_file", f"tls_{role}_cert", f"tls_{role}_key"):
        path = getattr(sec, attr)
        if path and not Path(path).is_file():
            raise UsageError(f"scheduler {address}: TLS file {path} not found")
    for attr in ("tls_ca_file", f"tls_{role}_cert"):
        fleet_credentials.check_dates(getattr(sec, attr))
    return Scheduler(address.strip(), host, loopback, sec)


def _connection_args(sched: Scheduler, role: str) -> dict[str, Any]:
    return sched.security.get_connection_args(role) if sched.security is not None else {}


def check_reachable(sched: Scheduler, role: str, wait: float = CONNECT_S) -> None:
    """That a Dask scheduler answers at the address within ``wait`` seconds (connected,
    handshake done, it says it is a scheduler), else one DltraceError line: a closed
    port, an HTTP server or a silent listener would otherwise be waited on for ever."""
    from distributed.comm.core import connect

    async def identify() -> Any:
        comm = await connect(sched.address, timeout=wait, **_connection_args(sched, role))
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    try:
        reply = asyncio.run(asyncio.wait_for(identify(), wait))
    except Exception as exc:  # whatever a wrong peer makes the handshake raise: one line
        why = _refused_certificate(exc) or (str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__)
        raise DltraceError(f"scheduler {sched.address} unreachable: no Dask scheduler answered within "
                           f"{wait:g} s ({why})") from None
    if not isinstance(reply, dict) or reply.get("type") != "Scheduler":
        raise DltraceError(f"scheduler {sched.address} unreachable: what answered is not a Dask scheduler")
    said = str(reply.get("address", ""))
    if sched.security is None and not _loopback(urlsplit(said).hostname or ""):
        # reached on loopback, but listening beyond it (dask scheduler --host 0.0.0.0): open to other machines
        raise UsageError(f"scheduler {sched.address} also listens on {said[:80]}, beyond this machine, without TLS "
                         f"(whoever reaches it runs code in every worker): start it with --host 127.0.0.1, or use "
                         f"TLS with certificates ({HOW})")


def _refused_certificate(exc: BaseException) -> str:
    """Why the handshake refused the scheduler's certificate, from the SSL error Dask
    wraps as "TLS certificate does not match" (an expired one says it expired), or ""."""
    import ssl

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return f"the scheduler's TLS certificate was refused: {seen.verify_message or seen.reason}"
        seen = seen.__cause__ or seen.__context__
    return ""


def _worker() -> dict[str, str]:
    """The Dask worker running this task, as the trace names it: its name (``dltrace
    worker --name``, else Dask's default, its address) and address."""
    from distributed import get_worker

    w = get_worker()
    return {"worker": str(w.name), "address": str(w.address), "arch": platform.machine()}


def run_remote(job: Job, fresh: bool, timeout: float) -> tuple[dict[str, str], dict[str, bytes]]:
    """On a worker: run the job into a temporary folder; return who ran it and its files' bytes."""
    who = _worker()
    if job.arch and job.arch != who["arch"]:
        raise DltraceError(f"worker {who['worker']} is {who['arch']}, the job needs {job.arch}")

    refused = [s.user.file for s in job.cases if s.user is not None and not _allowed(s.user.file)]
    if refused:
        raise DltraceError(f"worker {who['worker']} runs only the workload files under its --workloads folders, "
                           f"not {refused[0]}")
    with tempdirs.owned("dltrace-fleet-") as root:
        run_job(job, root, fresh=True, timeout=timeout)
        files = {str(p.relative_to(root)): p.read_bytes() for p in (root / "traces").rglob("*") if p.is_file()}
    return who, files


def _gap_all(job: Job, root: Path, why: str) -> SurveyEvent:
    event = SurveyEvent(job, len(job.cases))
    for spec in job.cases:
        g = Gap(job.framework.name, job.device, job.variant, spec.primitive, spec.api, why, "scheduler", job.cpu,
                job.arch)
        path = case_path(root, job, spec)
        ensure_file_parent(path)
        write_bytes(path.with_name(path.name[: -len(".json")] + GAP_SUFFIX), gap_json(g).encode())
        event.gaps.append(g)
    return event


def _todo(job: Job, root: Path, fresh: bool) -> bool:
    """Whether any case of ``job`` lacks a trace here (a re-run reuses what is there)."""
    return fresh or any(not case_path(root, job, s).is_file() for s in job.cases)


def _resources(client: Client) -> list[dict[str, float]]:
    info = client.scheduler_info(n_workers=-1)
    if "workers" not in info:  # what a client that lost its scheduler answers
        raise ConnectionError("the connection to the scheduler closed")
    return [dict(w.get("resources") or {}) for w in info["workers"].values()]


def _stamp(path: Path, who: dict[str, str]) -> None:
    """Name in a trace the worker that recorded it (meta ``recorded_by``); a file that
    is not a readable trace is left as it came, for the report to list as a problem."""
    try:
        trace = load(path)
    except TraceFormatError:
        return
    trace.set_meta("recorded_by", {k: str(v) for k, v in who.items()})
    save(trace, path)


def _receive(fut: _Sent, job: Job, root: Path) -> SurveyEvent:
    """Write what a finished job sent back; a job that raised (its worker died) is a gap."""
    try:
        who, files = fut.result()
    except Exception as exc:
        return _gap_all(job, root, f"worker failed: {type(exc).__name__}: {exc}")
    event = SurveyEvent(job, len(job.cases))
    for rel, data in files.items():
        if ".." in Path(rel).parts or Path(rel).is_absolute() or not rel.startswith("traces/"):
            continue  # a worker only writes under the survey's traces
        ensure_file_parent(root / rel)
        write_bytes(root / rel, data)
        if rel.endswith(GAP_SUFFIX):
            event.gaps.append(load_gap(root / rel))
        else:
            _stamp(root / rel, who)
    return event


def _lost(job: Job, root: Path, why: str) -> SurveyEvent:
    return _gap_all(job, root, f"scheduler lost mid-survey ({why}); run the survey again for this job")


def run(jobs: list[Job], root: Path, address: str | Scheduler, fresh: bool = False, timeout: float = DEFAULT_TIMEOUT,
        on_event: Callable[[SurveyEvent], None] = lambda e: None, lost_after: float = LOST_S) -> list[Gap]:
    """Submit the jobs to the scheduler at ``address``; write the traces as each job ends.
    A scheduler that cannot be reached is one DltraceError line before anything runs; one
    that goes away mid-survey (unreachable for ``lost_after`` seconds, or its client
    gave up reconnecting) costs only the jobs not back yet, each a gap, and the survey
    goes on to its report: every job ends in traces or gaps."""
    import time

    from distributed import Client, wait

    sched = address if isinstance(address, Scheduler) else scheduler(address, "client")
    check_reachable(sched, "client")
    # a lost scheduler is said once, as the gaps of the jobs it cost, not as Dask's own log lines
    logging.getLogger("distributed.client").setLevel(logging.CRITICAL)
    try:
        client = Client(sched.address, timeout=CONNECT_S, security=sched.security)  # the default: wait() uses it
    except Exception as exc:
        raise DltraceError(f"scheduler {sched.address} unreachable: {type(exc).__name__}: "
                           f"{str(exc).splitlines()[0][:160] if str(exc) else ''}") from None
    gaps: list[Gap] = []
    ended: set[int] = set()  # the jobs (by id) that ended in an event

    def emit(event: SurveyEvent) -> None:
        ended.add(id(event.job))
        gaps.extend(event.gaps)
        on_event(event)

    routed = list(jobs)
    futures: dict[_Sent, Job] = {}
    try:
        workers = _resources(client)
        routed = route(jobs, workers)
        for job in routed:
            if not _todo(job, root, fresh):
                emit(SurveyEvent(job, len(job.cases), reused=len(job.cases)))
                continue
            req = needs(job)
            if not runnable(req, workers):
                emit(_gap_all(job, root, f"no worker of the scheduler has {', '.join(sorted(req))}"))
                continue
            futures[client.submit(run_remote, job, fresh, timeout, resources=req, pure=False)] = job
        pending = set(futures)
        silent_since: float | None = None
        while pending:
            try:
                done, not_done = wait(list(pending), timeout=5, return_when="FIRST_COMPLETED")
            except TimeoutError:  # distributed.wait raises when nothing ended in time
                done, not_done = set(), pending
            except _LOST:  # the scheduler went away under the wait: the check below says for how long
                done, not_done = set(), pending
                time.sleep(1)  # never a busy loop while it is away
            pending = set(not_done) - set(done)
            for fut in done:
                emit(_receive(fut, futures[fut], root))
            if pending and not done:  # a worker may have died: never wait on jobs no worker left can run
                try:
                    if client.status not in ("running", "connecting"):  # it gave up reconnecting
                        raise ConnectionError(f"the connection to the scheduler closed (client {client.status})")
                    workers = _resources(client)
                    silent_since = None
                except _LOST:
                    silent_since = silent_since or time.monotonic()
                    if client.status in ("running", "connecting") and time.monotonic() - silent_since < lost_after:
                        continue
                    raise
                for fut in [f for f in pending if not runnable(needs(futures[f]), workers)]:
                    fut.cancel()
                    pending.discard(fut)
                    emit(_gap_all(futures[fut], root, "worker lost mid-job and no worker left has "
                                  + ", ".join(sorted(needs(futures[fut])))))
    except _LOST as exc:  # the scheduler is gone: what came back is kept, every other job is a gap
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        for job in routed:
            if id(job) not in ended:
                emit(_lost(job, root, why))
    finally:
        try:
            client.close(timeout=CONNECT_S)
        except Exception:  # closing a client whose scheduler has gone: nothing left to close
            pass
    return gaps


#: The folders whose workload files this worker process runs (``dltrace worker --workloads``).
WORKLOADS_ENV = "DLTRACE_FLEET_WORKLOADS"


def _allowed(file: str) -> bool:
    """Whether this worker runs the workload ``file``: one under a folder it was started
    with (its own side's files; a client names a path, never sends code)."""
    folders = [Path(f) for f in os.environ.get(WORKLOADS_ENV, "").split(os.pathsep) if f]
    real = Path(file).resolve()
    return any(real.is_relative_to(f) for f in folders)


def start_worker(address: str | Scheduler, frameworks: Iterable[Framework], nthreads: int = 2,
                 name: str | None = None, emulation: bool = True, gpu: bool = True,
                 workloads: Iterable[Path] = ()) -> None:
    """Run a Dask worker in this process until interrupted, declaring this machine's
    resources (of ``frameworks``; ``emulation``/``gpu`` False leave those out). The
    scheduler is checked first (one line if it does not answer); on a loopback
    scheduler the worker listens on loopback too, never on every interface."""
    from distributed import Worker

    sched = address if isinstance(address, Scheduler) else scheduler(address, "worker")
    check_reachable(sched, "worker")
    res = resources_here(frameworks, emulation=emulation, gpu=gpu)
    folders = [str(Path(f).resolve()) for f in workloads]
    if folders:  # workload files under these folders, and no others, run here
        os.environ[WORKLOADS_ENV] = os.pathsep.join(folders)
        res[WORKLOAD_RESOURCE] = SLOTS
    host = ("::1" if ":" in sched.host else "127.0.0.1") if sched.loopback else None

    async def main() -> None:
        local = "[::1]" if host == "::1" else "127.0.0.1"
        # death_timeout: a scheduler gone for that long ends the worker (it would retry for ever)
        w = Worker(sched.address, nthreads=nthreads, resources=res, name=name, security=sched.security, host=host,
                   dashboard=False, dashboard_address=f"{local}:0", death_timeout=STOP_S * 6)
        try:
            await asyncio.wait_for(w, CONNECT_S * 3)
        except Exception as exc:
            await w.close()
            raise DltraceError(f"worker could not join the scheduler at {sched.address}: "
                               f"{str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}") from None
        async with w:
            await w.finished()

    _serve(main)


def start_scheduler(port: int, scheduler_file: Path | None, announce: Callable[[str], None]) -> None:
    """Run a Dask scheduler for a fleet on this machine, in this process until told to
    stop: on loopback only, over mutual TLS with the certificates dltrace makes for this
    user (made the first time), so another local user cannot use it. ``announce`` gets
    its address once it listens; ``scheduler_file`` is Dask's (the address as JSON),
    written here (:func:`_write_scheduler_file`), never by Dask, which opens it as it is."""
    from distributed import Scheduler as DaskScheduler

    if scheduler_file is not None:
        _refuse_link(scheduler_file)
    creds = fleet_credentials.ensure()

    async def main() -> None:
        log = logging.getLogger("distributed")
        level = log.level
        log.setLevel(logging.WARNING)  # a start that fails is one line, not Dask's INFO lines before it
        s = DaskScheduler(host="127.0.0.1", port=port, protocol="tls", security=creds.security(), dashboard=False,
                          dashboard_address="127.0.0.1:0")
        try:
            await s
        except (OSError, RuntimeError) as exc:  # Dask wraps the listener's OSError in a RuntimeError
            await s.close()
            raise DltraceError(f"scheduler could not listen on 127.0.0.1:{port}: {_why_not_listening(exc)}") from None
        finally:
            log.setLevel(level)
        async with s:
            if scheduler_file is not None:
                _write_scheduler_file(scheduler_file, s.identity())
            try:
                announce(s.address)
                await s.finished()
            finally:
                if scheduler_file is not None:
                    scheduler_file.unlink(missing_ok=True)

    _serve(main)


def _why_not_listening(exc: BaseException) -> str:
    """The OSError under what Dask raised (port in use: ``Address already in use``)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError):
            return seen.strerror or str(seen)
        seen = seen.__cause__ or seen.__context__
    return str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__


def _refuse_link(path: Path) -> None:
    """A scheduler file that is a symbolic link is refused: writing through it would
    replace whatever file it points at (another user's link in a shared folder)."""
    if path.is_symlink():
        raise UsageError(f"--scheduler-file {path} is a symbolic link: name a file of its own")


def _write_scheduler_file(path: Path, identity: dict[str, Any]) -> None:
    """Dask's scheduler file (its identity as JSON), written to a temporary name beside
    ``path`` and renamed: a link put there since the start is replaced, never followed."""
    ensure_file_parent(path)
    write_bytes(path, json.dumps(identity, indent=2, default=str).encode())


def _serve(main: Callable[[], Any]) -> None:
    """Run a fleet process's ``main`` until it ends or is told to stop (SIGTERM, Ctrl-C),
    ending within STOP_S of being told."""
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _stopping)
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        _stop_within(STOP_S)  # asyncio's shutdown cancels Dask's tasks, one of which may not end when cancelled
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


#: Seconds a worker told to stop (SIGTERM, Ctrl-C) has to end before it ends itself.
STOP_S = 10.0


def _stop_within(seconds: float) -> None:
    """End this process after ``seconds`` unless it has ended by then: a worker told to
    stop must not hang in asyncio's shutdown (it did, 47 minutes, waiting for a
    cancelled Dask task that never ended)."""
    timer = threading.Timer(seconds, lambda: os._exit(Exit.INTERRUPTED))
    timer.daemon = True
    timer.start()


def _stopping(signum: int, frame: object) -> None:
    _stop_within(STOP_S)
    raise KeyboardInterrupt
