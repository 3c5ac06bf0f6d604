"""A survey run through a real Dask scheduler and workers on loopback (tracer.fleet),
and the choices the fleet makes on declared worker resources (pure functions: no
aarch64 machine is at hand, so a native ARM worker is a resource dict here); and the
schedulers it refuses: bad addresses, plain TCP beyond this machine, silent or wrong
peers, clients without a certificate, a scheduler lost mid-survey."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import distributed
import pytest

from tests.conftest import assert_tls_refused, dltrace, one_line_error, stop_processes
from tracer import fleet, envs, fleet_credentials, fleet_routing
from tracer import survey as sv
from tracer.contract import MODELS, Exit
from tracer.gap import Gap, gap_json, load_gap
from tracer.knowledge import knowledge
from tracer.trace import Frame, Node, Run, Trace, load

K = knowledge()

BIN = Path(sys.executable).parent
X86 = {"arch-x86_64": 2, "fw-torch": 2, "fw-tensorflow": 2}
EMU = {"arch-x86_64": 2, "fw-torch": 2, "emu-torch-a64fx": 2, "emu-torch-neoverse-n1": 2,
       "fw-tensorflow": 2, "emu-tensorflow-a64fx": 2, "emu-tensorflow-neoverse-n1": 2}
ARM = {"arch-aarch64": 2, "fw-torch": 2}


# ----------------------------------------------------------------------------- routing (pure)


def _arm_jobs(frameworks, name: str) -> list[sv.Job]:
    return [j for j in sv.plan([frameworks[name]], ["relu"], ["cpu"], arm=True) if j.cpu]


def test_arm_jobs_stay_emulated_without_an_aarch64_worker(frameworks):
    jobs = _arm_jobs(frameworks, "torch")
    assert {j.cpu for j in jobs} == {"a64fx", "neoverse-n1"}
    routed = fleet_routing.route(jobs, [X86, EMU], here="x86_64")
    assert routed == jobs
    assert [fleet_routing.needs(j) for j in routed] == [{f"emu-torch-{j.cpu}": 1} for j in jobs]


def test_arm_jobs_prefer_a_native_aarch64_worker(frameworks):
    jobs = _arm_jobs(frameworks, "torch")
    (native,) = fleet_routing.route(jobs, [EMU, ARM], here="x86_64")  # the two emulated models: one real CPU
    assert native.cpu == "" and native.arch == "aarch64" and native.cases == jobs[0].cases
    assert native.folder == "torch/aarch64-native-default"
    assert fleet_routing.needs(native, "x86_64") == {"fw-torch": 1, "arch-aarch64": 1}
    # the plain CPU jobs stay on the submitting machine's architecture
    cpu = [j for j in sv.plan([frameworks["torch"]], ["relu"], ["cpu"], arm=True) if not j.cpu]
    assert fleet_routing.route(cpu, [EMU, ARM], here="x86_64") == cpu


def test_native_routing_needs_the_framework_on_the_arm_worker(frameworks):
    jobs = _arm_jobs(frameworks, "tensorflow")  # default and onednn-on, on two models
    assert fleet_routing.route(jobs, [EMU, ARM], here="x86_64") == jobs  # the ARM worker has no TensorFlow
    both = fleet_routing.route(jobs, [EMU, {**ARM, "fw-tensorflow": 1}], here="x86_64")
    assert [(j.arch, j.variant) for j in both] == [("aarch64", "default"), ("aarch64", "onednn-on")]


def test_on_an_aarch64_machine_emulated_models_stay_emulated(frameworks):
    jobs = _arm_jobs(frameworks, "torch")
    assert fleet_routing.route(jobs, [ARM, {**ARM, "emu-torch-a64fx": 1, "emu-torch-neoverse-n1": 1}],
                       here="aarch64") == jobs


def test_a_native_arm_gap_says_so_and_old_gaps_read(tmp_path):
    g = Gap("torch", "cpu", "default", "relu", "functional", "no", "scheduler", "", "aarch64")
    path = tmp_path / "relu-functional.gap.json"
    path.write_text(gap_json(g))
    assert load_gap(path) == g
    old = Gap("torch", "cpu", "default", "relu", "functional", "no")
    assert "arch" not in json.loads(gap_json(old))  # written only where set
    path.write_text(gap_json(old))
    assert load_gap(path) == old


def _arm_trace(arch: str, emulated: bool) -> Trace:
    root = Node(Frame("root", "", "relu.forward"), 1)
    call = Node(Frame("library", "oneDNN", "eltwise jit:sve_512"), 1)
    lib = Node(Frame("root", "", "relu.forward"), 1, children=[call])
    meta = {"framework": "torch", "primitive": "relu", "api": "functional", "device": "cpu", "variant": "default",
            "shape": [2, 3, 8, 8], "machine": {"arch": arch, "cpu": "Neoverse-V1"},
            "recorded_by": {"worker": "arm1", "address": "tcp://192.0.2.1:1"}}
    if emulated:
        meta["emulated"] = {"cpu": "a64fx"}
    return Trace(meta, [Run("forward", "warm", {"python": root, "library": lib})])


def test_arm_audit_has_a_native_aarch64_column():
    from tracer.analysis.arm_audit import arm_audit, on_arm

    native = _arm_trace("aarch64", emulated=False)
    assert on_arm(native) == "native" and on_arm(_arm_trace("aarch64", True)) == "emulated"
    audit = arm_audit([native], [Gap("torch", "cpu", "default", "conv2d", "functional", "lost", "scheduler",
                                     "", "aarch64")], k=K)
    assert audit is not None and audit.machines == ["aarch64 (native)"]
    assert audit.rows["relu"]["aarch64 (native)"].calls["forward"] == ["eltwise jit:sve_512"]
    assert audit.rows["conv2d"]["aarch64 (native)"].failed == "lost"


def test_recorded_by_is_checked_field_by_field(tmp_path):
    from tracer.trace import TraceFormatError, save

    t = _arm_trace("aarch64", False)
    save(t, tmp_path / "t.json")
    assert load(tmp_path / "t.json").meta["recorded_by"]["worker"] == "arm1"
    t.meta["recorded_by"] = {"worker": 3}
    save(t, tmp_path / "bad.json")
    with pytest.raises(TraceFormatError, match="recorded_by.worker"):
        load(tmp_path / "bad.json")


def test_worker_options_narrow_the_declared_resources(frameworks, monkeypatch):
    monkeypatch.setattr(fleet_routing, "_emulated_ready", lambda fw: fw.aarch64 is not None)
    monkeypatch.setattr(fleet_routing, "gpu_count", lambda: 1)
    monkeypatch.setattr(envs, "status", lambda fw: type("S", (), {"ready": True})())
    every = fleet_routing.resources_here([frameworks["torch"], frameworks["chainer"]])
    assert {"gpu", "fw-torch", "fw-chainer", "emu-torch-a64fx", "emu-chainer-neoverse-n1"} <= set(every)
    plain = fleet_routing.resources_here([frameworks["torch"]], emulation=False, gpu=False)
    assert set(plain) == {f"arch-{fleet.platform.machine()}", "fw-torch"}


@pytest.fixture(scope="module")
def cluster(frameworks):
    """A scheduler and one in-process worker on 127.0.0.1, random ports, declaring this machine's resources."""
    res = fleet_routing.resources_here(frameworks.values())
    with distributed.LocalCluster(n_workers=1, processes=False, threads_per_worker=2, host="127.0.0.1", protocol="tls",
                                  security=fleet_credentials.ensure().security(), scheduler_port=0,
                                  dashboard_address=None, resources=res) as lc:
        yield lc


def _op_frames(trace) -> dict[tuple[str, str], list[tuple[int, str]]]:
    """Per run, the op layer's frames (depth, name): what a fleet run must reproduce."""
    return {(r.pass_, r.phase): [(d, n.frame.name) for d, n in r.layers["op"].walk()]
            for r in trace.runs if "op" in r.layers}


def test_fleet_survey_brings_traces_back_like_a_local_run(cluster, frameworks, tmp_path):
    fw = frameworks["chainer"]
    if not envs.status(fw).ready:
        pytest.fail("chainer environment not set up (dltrace env setup chainer)")
    jobs = sv.plan([fw], ["relu"], ["cpu"], variants=False)
    remote, local = tmp_path / "remote", tmp_path / "local"
    gaps = fleet.run(jobs, remote, cluster.scheduler_address, timeout=300)
    assert gaps == []
    assert sv.run(jobs, local, workers=1, timeout=300) == []
    for spec in jobs[0].cases:
        got, want = load(sv.case_path(remote, jobs[0], spec)), load(sv.case_path(local, jobs[0], spec))
        assert _op_frames(got) and _op_frames(got) == _op_frames(want)
        assert got.meta["machine"] == want.meta["machine"]


def test_gpu_job_without_gpu_worker_is_a_scheduler_gap(cluster, frameworks, tmp_path):
    if fleet_routing.gpu_count():
        pytest.skip("this machine has a GPU: its worker can run the job")
    fw = frameworks["chainer"]
    job = sv.Job(fw, "gpu", "default", sv.plan([fw], ["relu"], ["cpu"], variants=False)[0].cases)
    gaps = fleet.run([job], tmp_path, cluster.scheduler_address, timeout=60)
    assert gaps and all(g.kind == "scheduler" and "gpu" in g.error for g in gaps)
    _, on_disk, _ = sv.read_folders([tmp_path / "traces"])
    assert len(on_disk) == len(job.cases)


@pytest.mark.slow
def test_unreachable_scheduler_is_one_line_error(tmp_path):
    from tracer.errors import DltraceError
    with pytest.raises(DltraceError, match="unreachable"):
        fleet.run([], tmp_path, fleet.scheduler("tcp://127.0.0.1:9", "client", trust_local_users=True), timeout=5)


class Processes:
    """`dltrace scheduler` and `dltrace worker` processes on 127.0.0.1 (TLS with the
    certificates dltrace makes for this user), stopped at the end."""

    def __init__(self, folder: Path) -> None:
        self.procs: list[subprocess.Popen] = []
        info = folder / "scheduler.json"
        self.start([str(BIN / "dltrace"), "scheduler", "--port", "0", "--scheduler-file", str(info)])
        deadline = time.monotonic() + 60
        while not info.is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.address = json.loads(info.read_text())["address"]

    def start(self, argv: list[str]) -> subprocess.Popen:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def worker(self, *options: str) -> subprocess.Popen:
        return self.start([str(BIN / "dltrace"), "worker", self.address, *options])

    def client(self) -> distributed.Client:
        return distributed.Client(self.address, security=fleet_credentials.ensure().security(), timeout=30,
                                  set_as_default=False)

    def stop(self) -> None:
        stop_processes(self.procs)


#: Two workers on this machine that differ: one offers torch and no emulation, one
#: torch and its emulated aarch64 CPUs; the survey has both kinds of job.
SURVEY = ("survey", "torch", "--primitives", "relu,conv2d", "--devices", "cpu", "--no-variants", "--no-native",
          "--no-imports", "--no-derive", "--no-examples")


@pytest.fixture(scope="module")
def two_workers(frameworks, survey_report, tmp_path_factory):
    """A fleet survey on two `dltrace worker` processes, and the same survey run here.
    Yields (fleet folder, local folder, each worker's declared resources by name, the
    fleet survey's stderr, the scheduler's address). The survey here reuses the shared
    survey's traces of the same cases (it probed them here, on this machine's CPU and
    the emulated ones): it only renders its report."""
    from tests.conftest import dltrace

    fw = frameworks["torch"]
    if not envs.status(fw).ready or not fleet_routing._emulated_ready(fw):
        pytest.fail("torch and its emulated aarch64 environment must be set up (dltrace env setup torch)")
    tmp = tmp_path_factory.mktemp("fleet2")
    procs = Processes(tmp)
    try:
        procs.worker("--name", "plain", "--frameworks", "torch", "--no-emulation", "--nthreads", "1")
        procs.worker("--name", "emu", "--frameworks", "torch", "--nthreads", "2")
        with procs.client() as client:
            client.wait_for_workers(2, timeout=120)
            declared = {w["name"]: w["resources"] for w in client.scheduler_info()["workers"].values()}
        jobs = sv.plan([fw], ["relu", "conv2d"], ["cpu"], variants=False, arm=True, models=list(MODELS))
        for job in jobs:
            for spec in job.cases:
                shared = sv.case_path(survey_report.parent, job, spec)
                assert shared.exists(), shared
                mine = sv.case_path(tmp / "local", job, spec)
                mine.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(shared, mine)
        remote = dltrace(*SURVEY, "--scheduler", procs.address, "-o", str(tmp / "fleet"), timeout=900)
        local = dltrace(*SURVEY, "-o", str(tmp / "local"), timeout=900)
        assert remote.returncode == 0, remote.stderr[-2000:]
        assert local.returncode == 0, local.stderr[-2000:]
        for job in jobs:  # every case is the shared survey's
            assert f"{job.folder}: {len(job.cases)} cases, {len(job.cases)} reused" in local.stderr, local.stderr
        yield tmp / "fleet", tmp / "local", declared, remote.stderr, procs.address
    finally:
        procs.stop()


def _case(t) -> tuple:
    emulated = t.meta.get("emulated")
    return (t.meta["framework"], t.meta["device"], t.meta.get("variant"), t.meta["primitive"], t.meta["api"],
            tuple(t.meta.get("shape", ())), emulated.get("cpu") if isinstance(emulated, dict) else "")


def test_two_workers_each_job_ran_where_it_could(two_workers):
    out, _, declared, _, _ = two_workers
    assert "emu-torch-a64fx" not in declared["plain"] and "emu-torch-a64fx" in declared["emu"]
    assert "fw-torch" in declared["plain"] and "fw-chainer" not in declared["emu"]
    traces, gaps, problems = sv.read_folders([out / "traces"])
    assert traces and not gaps and not problems
    emulated = [t for t in traces if t.meta.get("emulated")]
    assert {t.meta["emulated"]["cpu"] for t in emulated} == {"a64fx", "neoverse-n1"}
    for t in traces:
        who = t.meta["recorded_by"]["worker"]
        cpu = _case(t)[-1]
        need = {f"emu-torch-{cpu}"} if cpu else {"fw-torch", f"arch-{fleet.platform.machine()}"}
        assert need <= set(declared[who]), (who, need)
    assert {t.meta["recorded_by"]["worker"] for t in emulated} == {"emu"}


def test_two_workers_traces_equal_a_local_surveys(two_workers):
    from tracer.analysis.arm_audit import arm_audit

    out, here, _, _, _ = two_workers
    got, got_gaps, _ = sv.read_folders([out / "traces"])
    want, want_gaps, _ = sv.read_folders([here / "traces"])
    assert got_gaps == want_gaps == []
    by_case = {_case(t): t for t in want}
    assert sorted(by_case) == sorted(_case(t) for t in got)
    for t in got:
        w = by_case[_case(t)]
        assert _op_frames(t) and _op_frames(t) == _op_frames(w), _case(t)
        assert t.meta["machine"] == w.meta["machine"] and "recorded_by" not in w.meta
    a, b = arm_audit(got, [], k=K), arm_audit(want, [], k=K)
    assert a.machines == b.machines and {p: {m: c.calls for m, c in r.items()} for p, r in a.rows.items()} \
        == {p: {m: c.calls for m, c in r.items()} for p, r in b.rows.items()}
    # the report says which workers recorded it; the local one names none
    workers = sorted({t.meta["recorded_by"]["worker"] for t in got})
    assert f"by fleet workers: {'; '.join(workers)}</p>" in (out / "index.html").read_text()
    assert "by fleet workers" not in (here / "index.html").read_text()


def test_two_workers_rerun_reuses_every_trace(two_workers):
    from tests.conftest import dltrace

    out, _, _, _, address = two_workers
    before = {p: p.stat().st_mtime_ns for p in (out / "traces").rglob("*.json")}
    proc = dltrace(*SURVEY, "--scheduler", address, "-o", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {p: p.stat().st_mtime_ns for p in (out / "traces").rglob("*.json")} == before
    assert proc.stderr.count("reused") == 3, proc.stderr  # the CPU job and the two emulated ones


def test_worker_killed_mid_job_becomes_a_gap(frameworks, tmp_path):
    """The only worker dies while probing: the job is a scheduler gap, the survey returns."""
    import threading

    procs = Processes(tmp_path)
    try:
        worker = procs.worker()
        deadline = time.monotonic() + 60
        with procs.client() as client:
            client.wait_for_workers(1, timeout=60)
            fw = frameworks["chainer"]
            jobs = sv.plan([fw], ["relu", "conv2d"], ["cpu"], variants=False)
            result: list = []

            def survey() -> None:
                try:
                    result.append(fleet.run(jobs, tmp_path / "s", procs.address))
                except BaseException as exc:  # shown by the assertion below
                    result.append(exc)

            thread = threading.Thread(target=survey)
            thread.start()
            while not any(client.processing().values()) and time.monotonic() < deadline + 60:
                time.sleep(0.1)
            worker.kill()
            thread.join(timeout=120)
        assert not thread.is_alive()
        (gaps,) = result
        assert isinstance(gaps, list), repr(gaps)
        assert gaps and all(g.kind == "scheduler" for g in gaps)
        assert any("worker" in g.error for g in gaps)
    finally:
        procs.stop()


def test_a_worker_told_to_stop_ends_within_seconds_when_its_scheduler_is_gone(frameworks, tmp_path):
    """Two workers were sent SIGTERM as their loopback scheduler stopped and hung for 47
    minutes in asyncio's shutdown: a worker told to stop ends within seconds, and one
    whose scheduler is gone ends by itself."""
    procs = Processes(tmp_path)
    try:
        told = procs.worker("--frameworks", "torch", "--no-emulation", "--nthreads", "1")
        left = procs.worker("--frameworks", "torch", "--no-emulation", "--nthreads", "1")
        with procs.client() as client:
            client.wait_for_workers(2, timeout=120)
        procs.procs[0].terminate()  # the scheduler goes away
        procs.procs[0].wait(timeout=30)
        told.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        told.wait(timeout=fleet.STOP_S + 20)
        assert time.monotonic() - t0 < fleet.STOP_S + 15
        left.wait(timeout=fleet.STOP_S * 6 + 60)  # no signal: its scheduler's absence ends it
    finally:
        procs.stop()


# ----------------------------------------------------------------------------- a fleet on a shared machine


def test_a_plain_loopback_scheduler_is_refused_where_the_machine_has_other_users(monkeypatch):
    """Every local user can reach a loopback port, and whoever reaches a plain scheduler
    runs code in every worker: on a machine with other users, tcp:// is refused unless
    the user says they trust them, and the line says how to do it securely."""
    monkeypatch.setattr(fleet_credentials, "other_users", lambda: ["alice", "bob", "carol", "dave"])
    with pytest.raises(fleet.UsageError) as refused:
        fleet.scheduler("tcp://127.0.0.1:8786", "worker")
    line = str(refused.value)
    assert "\n" not in line and "other users (alice, bob, carol and 1 more)" in line
    assert "dltrace scheduler" in line and "tls://127.0.0.1:8786" in line and "--trust-local-users" in line
    assert fleet.scheduler("tcp://127.0.0.1:8786", "worker", trust_local_users=True).security is None
    monkeypatch.setattr(fleet_credentials, "other_users", lambda: [])
    assert fleet.scheduler("tcp://127.0.0.1:8786", "client").loopback


def test_other_users_are_the_login_accounts_of_people(monkeypatch):
    import os
    import pwd

    me = os.getuid()
    people = [pwd.struct_passwd(fields) for fields in (
        ("root", "x", 0, 0, "", "/root", "/bin/bash"),
        ("me", "x", me, me, "", "/home/me", "/bin/bash"),
        ("alice", "x", me + 1 if me >= 1000 else 1001, 1001, "", "/home/alice", "/bin/zsh"),
        ("daemon", "x", 1, 1, "", "/usr/sbin", "/usr/sbin/nologin"),
        ("svc", "x", 1500 if me != 1500 else 1501, 1500, "", "/", "/usr/sbin/nologin"),
        ("nobody", "x", 65534, 65534, "", "/nonexistent", "/bin/sh"))]
    monkeypatch.setattr(pwd, "getpwall", lambda: people)
    assert fleet_credentials.other_users() == ["alice"]


def test_credentials_are_made_once_private_and_signed_by_their_own_ca(tmp_path, monkeypatch):
    from cryptography import x509

    monkeypatch.setenv("DLTRACE_HOME", str(tmp_path))
    assert fleet_credentials.existing() is None
    with pytest.raises(fleet.UsageError, match="dltrace has made none.*dltrace scheduler"):
        fleet.scheduler("tls://127.0.0.1:8786", "client")
    creds = fleet_credentials.ensure()
    assert creds.folder.stat().st_mode & 0o777 == 0o700
    files = sorted(creds.folder.iterdir())
    assert [f.name for f in files] == ["ca.pem", "client.key", "client.pem", "scheduler.key", "scheduler.pem",
                                       "worker.key", "worker.pem"]  # the CA's key is not among them
    assert all(f.stat().st_mode & 0o777 == 0o600 for f in files)
    before = {f: f.read_bytes() for f in files}
    assert fleet_credentials.ensure() == creds and {f: f.read_bytes() for f in files} == before
    ca = x509.load_pem_x509_certificate(creds.ca.read_bytes())
    for role in fleet_credentials.ROLES:
        x509.load_pem_x509_certificate(creds.cert(role).read_bytes()).verify_directly_issued_by(ca)
    sched = fleet.scheduler("tls://127.0.0.1:8786", "worker")
    assert sched.security is not None and sched.security.tls_worker_cert == str(creds.cert("worker"))
    creds.folder.chmod(0o755)  # another user could now read the keys
    with pytest.raises(fleet.DltraceError, match="not a folder only you can use"):
        fleet.scheduler("tls://127.0.0.1:8786", "worker")


@pytest.mark.slow
def test_dltrace_scheduler_admits_only_the_holders_of_its_credentials(tmp_path):
    """`dltrace scheduler` listens on loopback over TLS: a client with this user's
    credentials is served, one without a certificate or with another CA's is refused,
    and plain TCP gets no scheduler."""
    procs = Processes(tmp_path)
    try:
        assert procs.address.startswith("tls://127.0.0.1:")
        with procs.client() as client:
            assert client.scheduler_info()["type"] == "Scheduler"
        other = fleet_credentials.Credentials(tmp_path / "other")
        other.folder.mkdir(mode=0o700)
        fleet_credentials._write(other.folder)
        ca = fleet_credentials.ensure().ca
        assert_tls_refused(procs.address, ca, None)
        assert_tls_refused(procs.address, ca, (other.cert("client"), other.key("client")))
    finally:
        procs.stop()


@pytest.mark.parametrize("address", ["", "not a url", "foo://127.0.0.1:8786", "tcp://[::1", "tcp://127.0.0.1:99999",
                                     "tcp://127.0.0.1", "tcp://127.0.0.1:0", "tcp://127.0.0.1:8786/x?y"])
def test_bad_scheduler_addresses_are_usage_errors(address, tmp_path):
    line = one_line_error(dltrace("worker", address, "--no-gpu", timeout=60), Exit.USAGE)
    assert "is not tcp://HOST:PORT or tls://HOST:PORT" in line
    line = one_line_error(dltrace("survey", "--scheduler", address, "-o", str(tmp_path / "s"), timeout=60),
                          Exit.USAGE)
    assert "is not tcp://HOST:PORT or tls://HOST:PORT" in line
    assert not (tmp_path / "s").exists()  # refused before any work


@pytest.mark.parametrize("address", ["tcp://10.1.2.3:8786", "tcp://0.0.0.0:8786", "tcp://example.org:8786",
                                     "tls://10.1.2.3:8786"])
def test_a_scheduler_off_this_machine_needs_tls_with_certificates(address, tmp_path):
    for command in (("worker", address, "--no-gpu"), ("survey", "--scheduler", address, "-o", str(tmp_path / "s"))):
        line = one_line_error(dltrace(*command, timeout=60), Exit.USAGE)
        assert "docs/fleet.md" in line and "--tls-ca-file" in line, line


def test_the_loopback_check_is_by_address_not_by_name():
    from tracer import fleet

    assert fleet.scheduler("tcp://127.0.0.1:8786", "client", trust_local_users=True).loopback
    assert fleet.scheduler("tcp://[::1]:8786", "worker", trust_local_users=True).loopback
    assert fleet.scheduler("tcp://localhost:8786", "worker", trust_local_users=True).loopback
    for host in ("127.0.0.1.example.org", "0.0.0.0", "192.168.1.5", "[::]"):
        with pytest.raises(fleet.UsageError, match="not on this machine"):
            fleet.scheduler(f"tcp://{host}:8786", "client")


def test_survey_scheduler_empty_is_not_a_local_run(tmp_path):
    out = tmp_path / "s"
    line = one_line_error(dltrace("survey", "--scheduler", "", "-o", str(out), timeout=60), Exit.USAGE)
    assert "scheduler address ''" in line and not out.exists()


class _Listener:
    """A TCP listener on loopback that accepts and never speaks (``http``: answers
    anything with an HTTP 400, as a web server on the wrong port does)."""

    def __init__(self, http: bool = False) -> None:
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.http, self.conns, self.stop = http, [], False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.conns.append(conn)
            if self.http:
                try:
                    conn.recv(4096)
                    conn.sendall(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass

    def close(self) -> None:
        self.stop = True
        self.thread.join()
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.mark.parametrize("peer", ["closed", "silent", "http"])
def test_an_unreachable_or_wrong_scheduler_is_one_line_within_the_wait(tmp_path, peer):
    from tracer import fleet

    listener = None if peer == "closed" else _Listener(http=peer == "http")
    port = listener.port if listener else _free_port()
    try:
        sched = fleet.scheduler(f"tcp://127.0.0.1:{port}", "client", trust_local_users=True)
        t0 = time.monotonic()
        with pytest.raises(fleet.DltraceError, match="unreachable: no Dask scheduler answered within 2 s"):
            fleet.check_reachable(sched, "worker", wait=2)
        assert time.monotonic() - t0 < 6
    finally:
        if listener:
            listener.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_worker_and_survey_at_a_silent_listener_end_in_one_line(tmp_path):
    listener = _Listener()
    try:
        for command in (("worker", f"tcp://127.0.0.1:{listener.port}", "--no-gpu", "--trust-local-users"),
                        ("survey", "--scheduler", f"tcp://127.0.0.1:{listener.port}", "--trust-local-users", "-o",
                         str(tmp_path / "s"))):
            t0 = time.monotonic()
            line = one_line_error(dltrace(*command, timeout=120))
            assert "unreachable" in line and time.monotonic() - t0 < 40
    finally:
        listener.close()


class _Fleet:
    """A scheduler (``tls``: `dask scheduler` with mutual TLS with the given files; else
    `dltrace scheduler`, with its own) and `dltrace worker` processes on loopback, with
    the environment ``env`` (a fake registry), stopped at the end."""

    def __init__(self, folder: Path, env: dict[str, str], tls: dict[str, Path] | None = None) -> None:
        import os
        import subprocess
        import sys

        self.env, self.procs, self.tls = {**os.environ, **env}, [], tls
        self.bin = Path(sys.executable).parent
        info = folder / "scheduler.json"
        if tls:
            self.scheduler = self._start([str(self.bin / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                                          "--no-dashboard", "--scheduler-file", str(info), "--protocol", "tls",
                                          "--tls-ca-file", str(tls["ca"]), "--tls-cert", str(tls["scheduler.pem"]),
                                          "--tls-key", str(tls["scheduler.key"])], subprocess)
        else:  # dltrace's own: TLS with the certificates it makes for the user of this DLTRACE_HOME
            self.scheduler = self._start([str(self.bin / "dltrace"), "scheduler", "--port", "0", "--scheduler-file",
                                          str(info)], subprocess)
        deadline = time.monotonic() + 60
        while not info.is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.address = json.loads(info.read_text())["address"]

    def _start(self, argv: list[str], subprocess) -> object:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env)
        self.procs.append(proc)
        return proc

    def certs(self, role: str) -> list[str]:
        assert self.tls
        return ["--tls-ca-file", str(self.tls["ca"]), "--tls-cert", str(self.tls[f"{role}.pem"]),
                "--tls-key", str(self.tls[f"{role}.key"])]

    def worker(self, *options: str) -> object:
        import subprocess

        certs = self.certs("worker") if self.tls else []
        return self._start([str(self.bin / "dltrace"), "worker", self.address, *certs, "--no-gpu", "--no-emulation",
                            *options], subprocess)

    def client(self):
        import distributed
        from distributed.security import Security

        from tracer.fleet_credentials import Credentials

        sec = Security(tls_ca_file=str(self.tls["ca"]), tls_client_cert=str(self.tls["client.pem"]),
                       tls_client_key=str(self.tls["client.key"]), require_encryption=True) if self.tls else \
            Credentials(Path(self.env["DLTRACE_HOME"]) / "fleet-credentials").security()
        return distributed.Client(self.address, security=sec, timeout=30, set_as_default=False)

    def stop(self) -> None:
        stop_processes(self.procs)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory) -> dict[str, Path]:
    """A CA and a certificate each for the scheduler, a worker and a client, signed by it
    (openssl, as docs/fleet.md makes them), and one from another CA."""
    import subprocess

    folder = tmp_path_factory.mktemp("tls")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    for ca in ("ca", "other-ca"):
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2",
            "-subj", f"/CN=dltrace test {ca}")
    for name, ca in (("scheduler", "ca"), ("worker", "ca"), ("client", "ca"), ("stranger", "other-ca")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj",
            f"/CN={name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2")
    files = {p.name: p for p in folder.iterdir()}
    files["ca"] = folder / "ca.pem"
    return files


@pytest.mark.slow
def test_a_tls_fleet_runs_a_survey_and_refuses_clients_without_a_certificate(fake_frameworks, tls_files, tmp_path):
    fleet = _Fleet(tmp_path, fake_frameworks, tls_files)
    try:
        fleet.worker("--name", "secure")
        with fleet.client() as client:
            client.wait_for_workers(1, timeout=60)
        out = tmp_path / "s"
        proc = dltrace("survey", "crashy", "--primitives", "batchnorm", "--devices", "cpu", "--no-native", "--no-arm",
                       "--no-imports", "--no-derive", "--no-variants", "--scheduler", fleet.address,
                       *fleet.certs("client"), "-o", str(out), env=fake_frameworks, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        (trace_file,) = (out / "traces").rglob("batchnorm-*.json")
        assert load(trace_file).meta["recorded_by"]["worker"] == "secure"
        # the attack of the issue: a client that reaches the scheduler without a certificate of its CA
        assert_tls_refused(fleet.address, tls_files["ca"], None)
        assert_tls_refused(fleet.address, tls_files["ca"], (tls_files["stranger.pem"], tls_files["stranger.key"]))
    finally:
        fleet.stop()


@pytest.mark.slow
def test_a_scheduler_that_dies_mid_survey_costs_only_the_jobs_in_flight(fake_frameworks, tmp_path):
    import os
    import subprocess

    fleet = _Fleet(tmp_path, fake_frameworks)
    try:
        fleet.worker()
        with fleet.client() as client:
            client.wait_for_workers(1, timeout=60)
            out = tmp_path / "s"
            # relu hangs in crashy's probe: its job is in flight when the scheduler dies
            survey = subprocess.Popen([str(fleet.bin / "dltrace"), "survey", "crashy", "--primitives", "relu",
                                       "--devices", "cpu", "--no-native", "--no-arm", "--no-imports", "--no-derive",
                                       "--no-variants", "--scheduler", fleet.address, "-o", str(out),
                                       "--timeout", "300"], env={**os.environ, **fake_frameworks},
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 60
            while not any(client.processing().values()) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert any(client.processing().values())
        t0 = time.monotonic()
        fleet.scheduler.kill()
        stdout, stderr = survey.communicate(timeout=180)
        took = time.monotonic() - t0
        assert survey.returncode == 0, stderr[-2000:]
        assert "Traceback" not in stderr and took < 90, (took, stderr[-2000:])
        gap = json.loads(next((out / "traces").rglob("relu-*.gap.json")).read_text())
        assert gap["kind"] == "scheduler" and "scheduler lost mid-survey" in gap["error"]
        assert (out / "index.html").is_file() and "report:" in stdout
    finally:
        fleet.stop()


def test_a_plain_scheduler_reached_on_loopback_but_listening_beyond_is_refused(tmp_path):
    import os
    import subprocess
    import sys

    info = tmp_path / "scheduler.json"
    sched = subprocess.Popen([str(Path(sys.executable).parent / "dask"), "scheduler", "--host", "0.0.0.0", "--port",
                              "0", "--no-dashboard", "--scheduler-file", str(info)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 60
        while not info.is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        port = json.loads(info.read_text())["address"].rsplit(":", 1)[1]
        for command in (("worker", f"tcp://127.0.0.1:{port}", "--no-gpu", "--trust-local-users"),
                        ("survey", "--scheduler", f"tcp://127.0.0.1:{port}", "--trust-local-users", "-o",
                         str(tmp_path / "s"))):
            line = one_line_error(dltrace(*command, timeout=120), Exit.USAGE)
            assert "beyond this machine, without TLS" in line and "--host 127.0.0.1" in line
        assert not (tmp_path / "s").exists()
    finally:
        sched.terminate()
        sched.wait(timeout=30)


# ----------------------------------------------------------------------------- workloads, the scheduler, dates


def test_only_a_workloads_own_job_asks_for_the_workloads_resource():
    """A survey plans each user's workload as a job of its own (tracer.survey.plan): relu
    runs on any worker of the framework, and only the workload waits for one started with
    --workloads."""
    from tracer import registry
    from tracer.contract import UserWorkload

    torch = registry.load()["torch"]
    jobs = sv.plan([torch], ["relu"], ["cpu"], native=False, variants=False,
                   workloads={"torch": [UserWorkload("mine", "/w/mine.py")]})
    asks = {tuple(c.primitive for c in j.cases): fleet_routing.WORKLOAD_RESOURCE in fleet_routing.needs(j, "x86_64")
            for j in jobs}
    assert asks[("mine",)] and not any(v for k, v in asks.items() if "mine" not in k), asks
    # no --workloads worker: relu still runs
    relu = next(j for j in jobs if "mine" not in [c.primitive for c in j.cases])
    assert fleet_routing.runnable(fleet_routing.needs(relu, "x86_64"), [X86])


def test_dltrace_scheduler_on_a_port_in_use_is_one_line(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line_error(dltrace("scheduler", "--port", str(port), env={"DLTRACE_HOME": str(tmp_path)},
                                      timeout=120))
    assert f"127.0.0.1:{port}" in line and "in use" in line


def test_a_scheduler_file_that_is_a_link_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("DLTRACE_HOME", str(tmp_path))
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "link.json").symlink_to(victim)
    with pytest.raises(fleet.UsageError, match="is a symbolic link"):
        fleet.start_scheduler(0, tmp_path / "link.json", print)
    assert victim.read_text() == "keep"
    assert not (tmp_path / "fleet-credentials").exists()  # refused before anything was made


def test_an_expired_certificate_says_it_expired_and_when(tmp_path):
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "old")])
    end = datetime.datetime(2020, 3, 4, 5, 6, tzinfo=datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(end - datetime.timedelta(days=1)).not_valid_after(end)
            .sign(key, hashes.SHA256()))
    (tmp_path / "old.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "old.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    with pytest.raises(fleet.DltraceError, match=r"old\.pem expired on 2020-03-04 05:06 UTC"):
        fleet.scheduler("tls://10.1.2.3:8786", "client", str(tmp_path / "old.pem"), str(tmp_path / "old.pem"),
                        str(tmp_path / "old.key"))
