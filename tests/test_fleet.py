"""A survey run through a real Dask scheduler and worker on loopback (tracer.fleet)."""

from __future__ import annotations

import pytest

from tracer import fleet, envs
from tracer import survey as sv
from tracer.trace import load

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster(frameworks):
    """A scheduler and one in-process worker on 127.0.0.1, random ports, declaring this machine's resources."""
    res = fleet.resources_here(frameworks.values())
    with distributed.LocalCluster(n_workers=1, processes=False, threads_per_worker=2, host="127.0.0.1", protocol="tcp",
                                  scheduler_port=0, dashboard_address=None, resources=res) as lc:
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
    if fleet.gpu_count():
        pytest.skip("this machine has a GPU: its worker can run the job")
    fw = frameworks["chainer"]
    job = sv.Job(fw, "gpu", "default", sv.plan([fw], ["relu"], ["cpu"], variants=False)[0].cases)
    gaps = fleet.run([job], tmp_path, cluster.scheduler_address, timeout=60)
    assert gaps and all(g.kind == "scheduler" and "gpu" in g.error for g in gaps)
    _, on_disk, _ = sv.collect([tmp_path / "traces"])
    assert len(on_disk) == len(job.cases)


def test_unreachable_scheduler_is_one_line_error(tmp_path):
    from tracer.errors import DltraceError
    with pytest.raises(DltraceError, match="unreachable"):
        fleet.run([], tmp_path, "tcp://127.0.0.1:9", timeout=5)


def test_cli_survey_on_a_real_scheduler_and_dltrace_worker(frameworks, tmp_path):
    """`dask scheduler` + `dltrace worker` as processes on 127.0.0.1; `dltrace survey --scheduler`."""
    import json
    import subprocess
    import sys
    import time
    from pathlib import Path

    from tests.conftest import dltrace

    bindir = Path(sys.executable).parent
    info = tmp_path / "scheduler.json"
    procs = [subprocess.Popen([str(bindir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", str(info)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while not info.is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(info.read_text())["address"]
        procs.append(subprocess.Popen([str(bindir / "dltrace"), "worker", address],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with distributed.Client(address, timeout=30) as client:
            client.wait_for_workers(1, timeout=60)
            (declared,) = [w["resources"] for w in client.scheduler_info()["workers"].values()]
        assert "fw-chainer" in declared
        out = tmp_path / "survey"
        proc = dltrace("survey", "chainer", "--primitives", "relu", "--devices", "cpu", "--no-variants",
                       "--no-native", "--no-arm", "--no-imports", "--scheduler", address, "-o", str(out), timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        traces, gaps, problems = sv.collect([out / "traces"])
        assert traces and not gaps and not problems
        assert {t.meta["framework"] for t in traces} == {"chainer"}
        assert (out / "index.html").is_file()
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_worker_killed_mid_job_becomes_a_gap(frameworks, tmp_path):
    """The only worker dies while probing: the job is a scheduler gap, the survey returns."""
    import json
    import subprocess
    import sys
    import threading
    import time
    from pathlib import Path

    bindir = Path(sys.executable).parent
    info = tmp_path / "scheduler.json"
    procs = [subprocess.Popen([str(bindir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", str(info)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while not info.is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(info.read_text())["address"]
        worker = subprocess.Popen([str(bindir / "dltrace"), "worker", address],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(worker)
        with distributed.Client(address, timeout=30) as client:
            client.wait_for_workers(1, timeout=60)
            fw = frameworks["chainer"]
            jobs = sv.plan([fw], ["relu", "conv2d"], ["cpu"], variants=False)
            result: list = []

            def survey() -> None:
                try:
                    result.append(fleet.run(jobs, tmp_path / "s", address))
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
        for p in reversed(procs):
            p.kill()
            p.wait()
