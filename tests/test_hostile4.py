"""Hostile input, round 4 (issue 36): the importers, a registry override, the Dask
fleet, emulation paths, DLTRACE_HOME and the command line, each attack tried as a
hostile user would, through the real command where it has one: one line (exit 1,
or 2 for usage), a refusal before anything runs, or a marked gap; never a
traceback, never a trace no later command reads."""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from tests.conftest import DLTRACE as DLTRACE_BIN
from tests.conftest import assert_tls_refused, dltrace, one_line_error, stop_processes
from tracer.contract import Exit
from tracer.importers import ImportFailed, import_file
from tracer.trace import Frame, Node, Run, Trace, load

REF = Path(__file__).resolve().parent.parent / "tracer" / "reference" / "imported"
MX_GPU = REF / "mxnet" / "mnist-cnn-gpu.mxnet-profile.json"
NVPROF = REF / "mxnet" / "mnist-cnn-k80.nvprof.nvvp"
TF_GPU = REF / "tensorflow-timeline" / "GPU" / "timeline_02_step_2.json"
KERNELS = "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL"


def _import(path: Path, framework: str, out: Path):
    return dltrace("import", str(path), "--framework", framework, "-o", str(out), timeout=300)


def _all_load(folder: Path) -> list[Trace]:
    """Every trace an import wrote, read back as every later command reads it."""
    files = sorted(folder.glob("*.json"))
    assert files
    return [load(f) for f in files]


# ----------------------------------------------------------------------------- importers: times


def test_kineto_times_that_overflow_are_left_out_and_the_first_is_named(tmp_path):
    conv = {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": 1, "tid": 1, "args": {}}
    events = [{**conv, "ts": 10, "dur": 5},
              {**conv, "ts": 1e308, "dur": 1e308},  # ts + dur overflows to infinity
              {**conv, "ts": 100, "dur": 1e306},  # its nanoseconds overflow
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 11, "dur": 1e307,
               "args": {"correlation": 1}}]
    src = tmp_path / "overflow.json"
    src.write_text(json.dumps({"traceEvents": events}))
    proc = _import(src, "torch", tmp_path / "o")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    (trace,) = _all_load(tmp_path / "o")
    prov = trace.meta["provenance"]
    assert prov["events_skipped_malformed"] == 3 and prov["first_malformed_event"] == 1
    assert trace.layer("forward", "op").children[0].time_ns == 5000


def _mxnet_with(tmp_path: Path, change) -> Path:
    doc = json.loads(MX_GPU.read_text())
    ops = [i for i, e in enumerate(doc["traceEvents"]) if isinstance(e, dict) and e.get("cat") == "operator"
           and e.get("name") == "Convolution"]
    change(doc["traceEvents"], ops)
    out = tmp_path / "bad.mxnet-profile.json"
    out.write_text(json.dumps(doc))  # NaN and Infinity as Python's json writes (and MXNet's reader reads) them
    return out


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e308])
def test_mxnet_times_that_are_not_finite_are_one_line_naming_the_event(tmp_path, value):
    def change(events, ops):
        events[ops[1]]["ts"] = value
    line = one_line_error(_import(_mxnet_with(tmp_path, change), "mxnet", tmp_path / "o"))
    assert "event " in line and "(Convolution)" in line and "ts is" in line
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").glob("*.json"))


def test_mxnet_op_that_ends_before_it_begins_is_one_line_not_an_unreadable_trace(tmp_path):
    def change(events, ops):
        begin, end = ops[0], ops[1]
        assert events[begin]["ph"] == "B" and events[end]["ph"] == "E"
        events[end]["ts"] = events[begin]["ts"] - 5
    line = one_line_error(_import(_mxnet_with(tmp_path, change), "mxnet", tmp_path / "o"))
    assert "ends at" in line and "before it begins" in line and "not imported" in line


@pytest.mark.parametrize("value, why", [(-5, "negative duration"), (float("nan"), "not a finite time"),
                                        (float("-inf"), "not a finite time")])
def test_tensorflow_timeline_bad_durations_are_one_line(tmp_path, value, why):
    doc = json.loads(TF_GPU.read_text())
    i = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "Op" and e.get("ph") == "X"
             and e.get("args", {}).get("op") == "MatMul")
    doc["traceEvents"][i]["dur"] = value
    src = tmp_path / "timeline.json"
    src.write_text(json.dumps(doc))
    line = one_line_error(_import(src, "tensorflow", tmp_path / "o"))
    assert f"event {i} (MatMul): dur" in line and why in line


def _nvprof_copy(tmp_path: Path, name: str, sql: str = "") -> Path:
    dst = tmp_path / name
    shutil.copyfile(NVPROF, dst)
    if sql:
        db = sqlite3.connect(dst)
        db.execute(sql)
        db.commit()
        db.close()
    return dst


@pytest.mark.parametrize("sql, why", [
    (f"update {KERNELS} set end = 1e308 where rowid = (select min(rowid) from {KERNELS})", "not times"),
    (f"update {KERNELS} set end = start - 1000 where rowid = (select min(rowid) from {KERNELS})", "before it starts"),
    (f"update {KERNELS} set start = 'soon' where rowid = (select min(rowid) from {KERNELS})", "not times"),
])
def test_nvprof_kernel_times_are_checked_and_the_row_named(tmp_path, sql, why):
    src = _nvprof_copy(tmp_path, "bad.nvvp", sql)
    line = one_line_error(_import(src, "mxnet", tmp_path / "o"))
    assert f"{KERNELS} row " in line and why in line


def test_nvprof_file_with_a_hash_sign_is_the_one_read_and_nothing_is_created(tmp_path):
    src = _nvprof_copy(tmp_path, "k80#.nvvp")
    proc = _import(src, "mxnet", tmp_path / "o")  # nothing named k80 beside it
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "k80").exists()
    # a decoy database called k80 beside it: still the named file is read, and hashed
    decoy = sqlite3.connect(tmp_path / "k80")
    decoy.execute("create table t (x)")
    decoy.commit()
    decoy.close()
    proc = _import(src, "mxnet", tmp_path / "o2")
    assert proc.returncode == 0, proc.stderr
    traces = _all_load(tmp_path / "o2")
    assert {t.meta["machine"]["gpu"] for t in traces} == {"Tesla K80"}
    assert {t.meta["provenance"]["sha256"] for t in traces} == {hashlib.sha256(src.read_bytes()).hexdigest()}


def test_nvprof_percent_encoded_name_is_not_decoded(tmp_path):
    (tmp_path / "a").mkdir()
    other = sqlite3.connect(tmp_path / "a" / "b.nvvp")  # what a%2fb.nvvp decodes to: not nvprof's
    other.execute("create table t (x)")
    other.commit()
    other.close()
    src = _nvprof_copy(tmp_path, "a%2fb.nvvp")
    proc = _import(src, "mxnet", tmp_path / "o")
    assert proc.returncode == 0, proc.stderr
    assert {t.meta["machine"]["gpu"] for t in _all_load(tmp_path / "o")} == {"Tesla K80"}


def test_nvprof_kernel_records_have_the_json_object_bound(tmp_path, monkeypatch):
    from tracer.importers import nvprof

    rows = sqlite3.connect(NVPROF).execute(f"select count(*) from {KERNELS}").fetchone()[0]
    monkeypatch.setattr(nvprof, "MAX_OBJECTS", rows - 1)
    with pytest.raises(ImportFailed, match=f"holds {rows:,} kernel records, more than the {rows - 1:,}"):
        import_file(NVPROF, "mxnet")
    monkeypatch.setattr(nvprof, "MAX_OBJECTS", rows)
    assert import_file(NVPROF, "mxnet")


@pytest.mark.parametrize("record, why", [
    ({"occurrences": -5}, "occurrences -5, not a count"),
    ({"total_self_time_in_us": float("nan")}, "total_self_time_in_us is nan"),
    ({"total_self_time_in_us": -1.0}, "negative"),
    ({"occurrences": 1.5}, "not a count"),
])
def test_op_stats_records_are_checked_and_named(monkeypatch, tmp_path, record, why):
    from tracer.importers import op_stats

    good = {"host_or_device": "Device", "op_type": "Conv2D", "occurrences": 3, "total_self_time_in_us": 2.0}
    monkeypatch.setattr(op_stats, "_dump", lambda path, fw, vocab: {"device_type": "GPU",
                                                                     "records": [good, {**good, **record}]})
    src = tmp_path / "x.tensorflow_stats.pb"
    src.write_bytes(b"\x08\x96\x01 a protobuf")
    with pytest.raises(ImportFailed, match=r"record 1 \(Conv2D\): .*" + why.split(",")[0].replace(".", r"\.")):
        import_file(src, "tensorflow")
    monkeypatch.setattr(op_stats, "_dump", lambda path, fw, vocab: {"device_type": "GPU", "records": [good]})
    (got,) = [r for r in import_file(src, "tensorflow") if r.primitive == "conv2d"]
    assert got.trace.layer("forward", "op").children[0].count == 3


def test_a_trace_no_command_reads_is_never_returned():
    from tracer.importers.checks import unreadable_tree

    ok = Node(Frame("root", "", "conv2d.forward"), 1, 5, children=[Node(Frame("op", "m", "Conv"), 2, 5)])
    trace = Trace({"framework": "mxnet"}, [Run("forward", "warm", {"op": ok})])
    assert unreadable_tree(trace) == ""
    ok.children[0].count = -5
    assert "'Conv' has count -5" in unreadable_tree(trace)
    ok.children[0].count, ok.children[0].time_ns = 1, math.nan
    assert "has time nan" in unreadable_tree(trace)


# ----------------------------------------------------------------------------- importers: slicing


def nested_backward_pairs(n: int) -> dict:
    """``n`` forward convolutions each linked by a fwdbwd flow to a backward node, the
    backward nodes nested one inside the next (2n deep) on the autograd thread."""
    ev: list[dict] = []
    for i in range(n):
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5,
                   "args": {}})
        ev.append({"ph": "s", "cat": "fwdbwd", "id": i, "pid": 1, "tid": 1, "ts": 10 * i + 1})
    t = 10 * n + 100
    for i in range(n):
        ev.append({"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: ConvolutionBackward0",
                   "pid": 1, "tid": 2, "ts": t + 3 * i, "dur": 6 * n - 6 * i, "args": {}})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "ConvolutionBackward0", "pid": 1, "tid": 2,
                   "ts": t + 3 * i + 0.5, "dur": 6 * n - 6 * i - 1, "args": {}})
        ev.append({"ph": "f", "cat": "fwdbwd", "id": i, "pid": 1, "tid": 2, "ts": t + 3 * i + 1, "bp": "e"})
    return {"traceEvents": ev}


def test_nested_backward_nodes_are_sliced_once_each(tmp_path):
    src = tmp_path / "nested.json"
    src.write_text(json.dumps(nested_backward_pairs(300)))
    (r,) = import_file(src, "torch")
    back = r.trace.layer("backward", "op")
    assert len(back.children) == 1  # the outermost node; the nodes inside it are in its tree, once
    info = r.trace.runs[1].stats["layers"]["op"] if r.trace.runs[1].pass_ == "backward" else None
    assert info is not None and info["instances"] == 1
    assert info["ops_cut_at_depth"] == 2 * 300 - 201  # the nest is 600 deep; 200 levels kept under the top
    depth = max(d for d, _ in back.walk())
    assert depth == 201


@pytest.mark.slow
def test_thirty_thousand_nested_pairs_import_in_seconds(tmp_path):
    src = tmp_path / "nested.json"
    src.write_text(json.dumps(nested_backward_pairs(30_000)))
    t0 = time.monotonic()
    (r,) = import_file(src, "torch")
    took = time.monotonic() - t0
    # a bound an order of magnitude above the 3 s measured, far below the 150 s of the quadratic walk
    assert took < 40, took
    assert r.trace.layer("backward", "op").children


# ----------------------------------------------------------------------------- registry overrides: data, not code

REGISTRY = """
frameworks:
  fw:
    import: json
    version: "1"
    probe: tests.crashprobe
    install: [{requirements: [x]}]
    devices: {cpu: cpu}
    source_roots: [json]
    apis: [functional]
"""


def _registry(tmp_path: Path, text: str) -> dict[str, str]:
    reg = tmp_path / "frameworks.yaml"
    reg.write_text(text)
    return {"DLTRACE_REGISTRY": str(reg), "DLTRACE_HOME": str(tmp_path / "home")}


def test_pip_options_as_requirements_are_refused_before_pip_runs(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    ran = tmp_path / "setup-py-ran"
    (pkg / "setup.py").write_text(f"open({str(ran)!r}, 'w').write('x')\nfrom setuptools import setup\nsetup()\n")
    env = _registry(tmp_path, REGISTRY.replace(
        "requirements: [x]", f'requirements: ["--no-index", "--no-build-isolation", "-e", "{pkg}"]'))
    line = one_line_error(dltrace("env", "setup", "fw", env=env, timeout=120))
    assert "field 'install[0].requirements' item '--no-index' is not a requirement specifier" in line
    assert "--trust-registry" in line and not ran.exists()


@pytest.mark.parametrize("step, where", [
    ('{requirements: ["--index-url=http://127.0.0.1:9/simple", x]}', "install[0].requirements"),
    ('{requirements: [x], options: ["--index-url=http://127.0.0.1:9/simple"]}', "install[0].options"),
    ('{requirements: ["x @ http://127.0.0.1:9/x.whl"]}', "install[0].requirements"),
    ('{requirements: ["./x"]}', "install[0].requirements"),
])
def test_other_indexes_urls_and_paths_are_refused(tmp_path, step, where):
    from tracer import registry

    env = _registry(tmp_path, REGISTRY.replace("{requirements: [x]}", step))
    with pytest.raises(registry.RegistryError, match=f"field '{re.escape(where)}'"):
        registry.load(env["DLTRACE_REGISTRY"])


def test_trust_registry_is_a_flag_the_user_types(tmp_path):
    env = _registry(tmp_path, REGISTRY.replace("{requirements: [x]}",
                                               '{requirements: ["./x"], options: ["--no-index"]}'))
    refused = dltrace("list", env=env, timeout=120)
    assert "is not a requirement specifier" in one_line_error(refused)
    trusted = dltrace("--trust-registry", "list", env=env, timeout=120)
    assert trusted.returncode == 0, trusted.stderr
    assert "fw" in trusted.stdout


@pytest.mark.parametrize("native", ["{rate: .inf}", "{rate: -.inf}", "{rate: .nan}", "{seconds: .nan}",
                                    "{seconds: .inf}", "{rate: 1e400}"])
def test_native_numbers_must_be_finite(tmp_path, native):
    env = _registry(tmp_path, REGISTRY + f"    native: {native}\n")
    line = one_line_error(dltrace("list", env=env, timeout=120))
    assert "field 'native' needs" in line


def test_a_name_with_a_trailing_newline_is_no_name(tmp_path):
    env = _registry(tmp_path, REGISTRY.replace("  fw:", '  "fw\\n":').replace(
        "import: json", 'import: "json\\n"'))
    assert "framework name 'fw\\n' must be a short name" in one_line_error(dltrace("list", env=env, timeout=120))
    env = _registry(tmp_path, REGISTRY.replace("import: json", 'import: "json\\n"'))
    assert "field 'import' must be a dotted module name" in one_line_error(dltrace("list", env=env, timeout=120))


def test_a_registry_that_is_a_fifo_or_a_device_or_huge_is_one_line(tmp_path):
    import os

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    line = one_line_error(dltrace("list", env={"DLTRACE_REGISTRY": str(fifo)}, timeout=60))
    assert "a named pipe, not a file" in line and time.monotonic() - t0 < 30
    line = one_line_error(dltrace("list", env={"DLTRACE_REGISTRY": "/dev/zero"}, timeout=60))
    assert "a character device, not a file" in line
    huge = tmp_path / "huge.yaml"
    huge.write_text(REGISTRY + "#" * (2 << 20) + "\n")
    assert "larger than the 1 MiB allowed" in one_line_error(
        dltrace("list", env={"DLTRACE_REGISTRY": str(huge)}, timeout=60))


BOMB = """\
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
"""


@pytest.mark.parametrize("where", ["    variants: {v: {description: *h, env: {A: '1'}}}\n",
                                   "    variants: {v: {set: {torch.x: *h}}}\n"])
def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path, where):
    bomb = "x-bomb:\n" + "".join(f"  {line}\n" for line in BOMB.splitlines())  # 9**8 strings once expanded
    env = _registry(tmp_path, bomb + REGISTRY + where)
    t0 = time.monotonic()
    line = one_line_error(dltrace("list", env=env, timeout=120))
    assert "more than 100,000 YAML nodes once its aliases are followed" in line
    assert time.monotonic() - t0 < 60


def test_a_recursive_alias_is_refused(tmp_path):
    from tracer import registry

    with pytest.raises(registry.RegistryError, match="YAML nodes once its aliases"):
        registry.load(_registry(tmp_path, "x: &a [*a]\n" + REGISTRY)["DLTRACE_REGISTRY"])
    # a few shared anchors, as a person writes them, still read
    assert "fw" in registry.load(_registry(tmp_path, "x: &a [1, 2]\ny: [*a, *a]\n" + REGISTRY)["DLTRACE_REGISTRY"])


# ----------------------------------------------------------------------------- the fleet


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


# ----------------------------------------------------------------------------- environments


def _script(path: Path, body: str) -> Path:
    """An executable 'interpreter' that behaves as ``body`` (a shell script) says."""
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_env_use_of_an_interpreter_that_never_stops_writing_is_bounded(fake_frameworks, tmp_path):
    chatty = _script(tmp_path / "python", "exec yes 'all work and no play'\n")
    env = {**fake_frameworks, "DLTRACE_HOME": str(tmp_path / "home")}
    t0 = time.monotonic()
    line = one_line_error(dltrace("env", "use", "crashy", str(chatty), env=env, timeout=120))
    assert "wrote more than 1 MiB while importing json; stopped" in line
    assert time.monotonic() - t0 < 60


@pytest.mark.slow
def test_list_with_hanging_interpreters_is_bounded(fake_frameworks, tmp_path):
    from tracer import envs

    hang = _script(tmp_path / "python", "exec sleep 600\n")
    home = tmp_path / "home"
    home.mkdir()
    (home / "external.json").write_text(json.dumps({"crashy": str(hang), "broken": str(hang), "absent": str(hang)}))
    t0 = time.monotonic()
    proc = dltrace("list", env={**fake_frameworks, "DLTRACE_HOME": str(home)}, timeout=200)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    # three hanging interpreters, asked at once: one version look-up's bound, not 3 x 300 s
    assert took < envs.VERSION_TIMEOUT_S * 2 + 20, took
    assert proc.stdout.count("ready ?") == 3


def test_a_relative_dltrace_home_names_the_same_folder_in_the_probe(fake_frameworks, tmp_path):
    home = tmp_path / "rel-home"
    home.mkdir()
    shutil.copy(Path(fake_frameworks["DLTRACE_HOME"]) / "external.json", home / "external.json")
    out = tmp_path / "t.json"
    proc = dltrace("probe", "crashy", "batchnorm", "--layers", "python", "-o", str(out),
                   env={**fake_frameworks, "DLTRACE_HOME": "rel-home"}, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    collector = load(out).meta["collector"]
    # the C core was built in rel-home/ext as the probe saw it, not in the probe's own (removed) folder
    assert collector == {"python": "c"} and list((home / "ext").glob("_ctrace-*")), collector


def test_the_c_core_build_on_a_full_disk_falls_back_with_the_path(tmp_path, monkeypatch):
    from tracer.collect import cbuild

    # a compiler that meets a full disk: it says so, removes its output and fails (as gcc does)
    cc = _script(tmp_path / "cc", 'for a; do [ "$prev" = -o ] && rm -f "$a"; prev=$a; done\n'
                                  'echo "fatal error: error writing to /tmp/ccX.s: No space left on device" >&2\n'
                                  'exit 1\n')
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("DLTRACE_HOME", str(tmp_path / "home"))
    with pytest.raises(cbuild.Unavailable, match=r"failed \(into .*home/ext\): .*No space left on device"):
        cbuild.build(force=True)
    assert not list((tmp_path / "home" / "ext").iterdir())  # nothing half-built left
    # a home that cannot be written at all: the path is named
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "ext").write_text("a file where the folder goes")
    monkeypatch.setenv("DLTRACE_HOME", str(tmp_path / "ro"))
    with pytest.raises(cbuild.Unavailable, match=r"cannot write .*ro/ext"):
        cbuild.build(force=True)


def test_a_write_error_names_its_file(tmp_path):
    import errno

    from tracer.files import describe, replacing

    target = tmp_path / "out.json"
    with pytest.raises(OSError) as info:
        with replacing(target) as fh:
            fh.write(b"x")
            raise OSError(errno.ENOSPC, "No space left on device")  # as a write to a full disk raises
    assert describe(info.value, "") == f"cannot write {target}: No space left on device"
    assert describe(OSError(errno.ENOSPC, "No space left on device"), "") == "cannot write: No space left on device"


# ----------------------------------------------------------------------------- emulation paths


@pytest.mark.parametrize("where", ["DLTRACE_HOME", "TMPDIR"])
def test_a_colon_in_a_bound_path_is_one_line_naming_the_setting(tmp_path, monkeypatch, where):
    from tracer.emulation import guest, layout

    odd = tmp_path / "a:b"
    odd.mkdir()
    monkeypatch.setenv("DLTRACE_HOME", str(odd if where == "DLTRACE_HOME" else tmp_path / "home"))
    monkeypatch.setenv("TMPDIR", str(odd if where == "TMPDIR" else tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    ok = tmp_path / "plain"
    if where == "DLTRACE_HOME":
        cpu_dir = odd / "emulated" / "_cpus" / "a64fx"
        call = lambda: guest.proot_argv(ok, ok, cpu_dir, "max", [])  # noqa: E731
    else:
        call = lambda: guest.proot_argv(ok, ok, ok, "max", [odd / "dltrace-x"])  # noqa: E731
    with pytest.raises(layout.DltraceError, match=f"set {where} to a path without ':'"):
        call()
    assert guest.proot_argv(ok, ok, ok, "max", [ok])[-1] == "/usr/bin/python3"


# ----------------------------------------------------------------------------- command line


@pytest.mark.parametrize("args", [("survey", "-o", ""), ("report", ".", "-o", ""), ("import", "x.json", "--framework",
                                                                                    "torch", "-o", " "),
                                  ("probe", "torch", "relu", "-o", ""), ("derive", "torch", "-o", "")])
def test_an_empty_output_is_a_usage_error_not_the_working_folder(tmp_path, args):
    before = set(tmp_path.iterdir())
    line = one_line_error(dltrace(*args, cwd=tmp_path, timeout=60), Exit.USAGE)
    assert "is empty" in line and set(tmp_path.iterdir()) == before


def test_a_long_shape_is_refused_by_rank_before_any_file(tmp_path):
    long = "x".join(["2"] * 200)
    line = one_line_error(dltrace("probe", "torch", "relu", "--shape", long, "-o", str(tmp_path / "t.json"),
                                  timeout=60), Exit.USAGE)
    assert "200 dimensions; at most 8" in line
    line = one_line_error(dltrace("probe", "torch", "conv2d", "--shape", "2x3x4", timeout=60), Exit.USAGE)
    assert "conv2d needs a 4-d shape" in line


# ----------------------------------------------------------------------------- leftovers


def test_folders_of_a_killed_dltrace_are_swept_at_the_next_start_and_live_ones_kept(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    from tracer import tempdirs

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    # a process that owns a folder and a perf map, killed by SIGKILL: nothing runs its clean-up
    perfmap = Path(f"/tmp/perf-{os.getpid() + 4_000_000}.map")  # a pid no process has
    code = ("import sys, time; from pathlib import Path; from tracer import tempdirs\n"
            "with tempdirs.owned() as d:\n"
            f"    Path({str(perfmap)!r}).write_text('0 1 k')\n"
            f"    tempdirs.note_perfmap(d, {str(perfmap)!r})\n"
            "    print(d, flush=True); time.sleep(600)\n")
    killed = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "TMPDIR": str(tmp_path)})
    dead = Path(killed.stdout.readline().strip())
    killed.kill()
    killed.wait()
    live_proc = subprocess.Popen([sys.executable, "-c", code.replace(str(perfmap), str(perfmap) + ".live")],
                                 stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    live = Path(live_proc.stdout.readline().strip())
    old = tmp_path / "dltrace-before-locks"
    old.mkdir()
    os.utime(old, (time.time() - 2 * tempdirs.UNLOCKED_AGE_S,) * 2)
    young = tmp_path / "dltrace-young"
    young.mkdir()
    try:
        assert dead.is_dir() and perfmap.exists()
        proc = dltrace("list", env={"TMPDIR": str(tmp_path)}, timeout=120)  # the next start
        assert proc.returncode == 0, proc.stderr
        assert not dead.exists() and not perfmap.exists() and not old.exists()
        assert live.is_dir() and young.is_dir()  # another dltrace's, alive; one that may be
    finally:
        live_proc.kill()
        live_proc.wait()
        perfmap.unlink(missing_ok=True)
        Path(str(perfmap) + ".live").unlink(missing_ok=True)


def test_a_probe_killed_with_dltrace_leaves_nothing_after_the_next_start(fake_frameworks, tmp_path):
    import os
    import signal
    import subprocess

    env = {**os.environ, **fake_frameworks, "TMPDIR": str(tmp_path)}
    # relu hangs in crashy's probe; dltrace is then killed outright, with no chance to clean up
    proc = subprocess.Popen([str(Path(DLTRACE_BIN)), "probe", "crashy", "relu", "--layers", "python"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("dltrace-*/request.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(tmp_path.glob("dltrace-*/request.json"))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(1)  # the probe dies with its parent
    assert list(tmp_path.glob("dltrace-*"))
    assert dltrace("list", env={**fake_frameworks, "TMPDIR": str(tmp_path)}, timeout=120).returncode == 0
    assert not list(tmp_path.glob("dltrace-*"))


def test_a_colon_in_dltrace_home_is_said_before_anything_emulated(tmp_path):
    line = one_line_error(dltrace("probe", "torch", "relu", "--cpu", "a64fx",
                                  env={"DLTRACE_HOME": str(tmp_path / "home:x")}, timeout=60))
    assert "set DLTRACE_HOME to a path without ':'" in line and "No module named" not in line


@pytest.mark.frameworks
def test_a_colon_in_tmpdir_is_one_line_for_an_emulated_probe(tmp_path):
    from tracer import emulation

    if emulation.status("torch") is None:
        pytest.fail("torch's emulated aarch64 environment must be set up (dltrace env setup torch --arch aarch64)")
    odd = tmp_path / "a:b"
    odd.mkdir()
    line = one_line_error(dltrace("probe", "torch", "relu", "--cpu", "a64fx", "--layers", "python",
                                  env={"TMPDIR": str(odd)}, timeout=300))
    assert "set TMPDIR to a path without ':'" in line and "No module named" not in line


def test_a_probe_lists_its_own_perf_map_for_dltrace_to_remove(tmp_path, monkeypatch):
    import os

    from tracer import tempdirs
    from tracer.collect import harness

    listing = tmp_path / tempdirs.PERFMAPS
    monkeypatch.setenv("DLTRACE_PERFMAP_LIST", str(listing))
    harness._list_own_perfmap()  # the probe's first step (under emulation its pid is not the one dltrace started)
    assert listing.read_text() == f"/tmp/perf-{os.getpid()}.map\n"
    monkeypatch.delenv("DLTRACE_PERFMAP_LIST")
    listing.unlink()
    harness._list_own_perfmap()  # a perf map the user asked for is theirs: not listed
    assert not listing.exists()


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
