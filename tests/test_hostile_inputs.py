"""Hostile and broken input, as the README promises to handle it: one line or a
marked gap, nothing executed, nothing lost, nothing left running. Traces come from
other machines and other people, so every string in one is treated as hostile."""

from __future__ import annotations

import gzip
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.conftest import DLTRACE, dltrace, one_line_error
from tracer import survey as sv
from tracer.contract import Exit
from tracer.trace import Frame, Node, Run, Trace, load, save

META = {"framework": "samplefw", "framework_version": "1.0", "primitive": "conv2d", "api": "functional",
        "device": "cpu", "variant": "default", "shape": [2, 3, 8, 8], "machine": {"arch": "x86_64", "cpu": "test"}}
INJECTION = '<a>, URL="javascript:alert(1337)", target=<_top>'


def op(name: str, *children: Node) -> Node:
    return Node(Frame("op", "aten", name), 1, 1000, children=list(children))


def write_pair(folder: Path, a_kernel: str, b_kernel: str, **meta) -> tuple[Path, Path]:
    """A default and a variant trace of one case whose op layers part below a shared op."""
    paths = []
    folder.mkdir(parents=True, exist_ok=True)
    for variant, kernel in (("default", a_kernel), ("fast", b_kernel)):
        tree = Node(Frame("root", "", "conv2d.forward"), 1, 3000,
                    children=[op("aten::conv2d", op("aten::_convolution", op(kernel)))])
        path = folder / f"{variant}.json"
        save(Trace({**META, "variant": variant, **meta}, [Run("forward", "warm", {"op": tree}, {"untraced_s": 1e-4})]),
             path)
        paths.append(path)
    return paths[0], paths[1]


def report_files(out: Path) -> list[Path]:
    return [p for p in out.rglob("*") if p.is_file()]


# ----------------------------------------------------------------------------- 1. script injection


def test_frame_names_cannot_inject_links_into_the_report(tmp_path):
    write_pair(tmp_path / "t", "aten::mkldnn_convolution", INJECTION)
    proc = dltrace("report", str(tmp_path / "t"), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "r" / "samplefw.html").read_text()
    files = list((tmp_path / "r" / "graphs").glob("*.svg"))
    inline = re.findall(r"<svg\b.*?</svg>", page, re.S)
    assert files and inline  # drawn, not refused
    for svg in [*inline, *(f.read_text() for f in files)]:
        root = ElementTree.fromstring(svg[svg.find("<svg"):])
        for el in root.iter():  # dot's tooltips are <a> with a title only: no link, no target
            assert not any("href" in k or k.lower() in ("url", "target") for k in el.attrib), el.attrib
    assert not re.search(r"href=[\"']?\s*javascript:", page, re.I)
    assert "javascript:alert(1337)" in page  # the name is shown, as text


# ----------------------------------------------------------------------------- 2. a graph that cannot be drawn


def test_a_graph_that_cannot_be_drawn_is_a_gap_not_a_lost_report(tmp_path):
    long_name = "at::native::" + "k" * 20000 + "<float>"
    write_pair(tmp_path / "t", "aten::mkldnn_convolution", long_name)
    write_pair(tmp_path / "u", "aten::mkldnn_convolution", "aten::thnn_conv2d", primitive="relu")
    proc = dltrace("report", str(tmp_path / "t"), str(tmp_path / "u"), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "r" / "samplefw.html").read_text()
    assert (tmp_path / "r" / "index.html").exists()
    # names are shortened for drawing, so both graphs are drawn
    assert page.count('<div class="graph"><svg') == 2
    assert max(len(g.read_text()) for g in (tmp_path / "r" / "graphs").glob("*.svg")) < 200_000


def test_drawing_failures_are_marked_on_the_page(tmp_path, monkeypatch):
    from tracer.analysis.portability import survey_reports
    from tracer.render import graphs
    from tracer.analysis.survey_model import assemble
    from tracer.knowledge import knowledge
    from tracer.render.html import write_report

    write_pair(tmp_path / "t", "aten::mkldnn_convolution", "aten::thnn_conv2d")
    traces = [load(p) for p in sorted((tmp_path / "t").glob("*.json"))]

    def failing(*args, **kwargs):
        raise graphs.GraphError("dot failed: syntax error in line 1")

    monkeypatch.setattr(graphs, "svg", failing)
    index = write_report(assemble(survey_reports(traces, [], k=knowledge()), [], [], knowledge()), tmp_path / "r")
    page = (tmp_path / "r" / "samplefw.html").read_text()
    assert index.exists() and 'class="warn small graph-gap">graph not drawn: dot failed: syntax error' in page


# ----------------------------------------------------------------------------- 3, 5, 10. corrupt and invalid traces


BAD_DEFLATE = gzip.compress(b'{"format": "dltrace-trace"}' * 50, mtime=0)[:10] + bytes([0, 5, 0, 0, 0]) + b"x" * 40


@pytest.mark.parametrize("content, why", [
    (BAD_DEFLATE, "corrupt or truncated trace"),
    (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
])
def test_corrupt_traces_are_one_line_in_every_command(tmp_path, content, why):
    good, _ = write_pair(tmp_path, "aten::mkldnn_convolution", "aten::thnn_conv2d")
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(content)
    for args in (["diff", str(bad), str(good)], ["diff", str(good), str(bad)], ["diff", str(bad)],
                 ["export", str(bad), "--format", "collapsed"], ["report", str(bad), "-o", str(tmp_path / "r")]):
        proc = dltrace(*args)
        if args[0] == "report":  # the only file is skipped with one line: nothing to report
            assert proc.returncode == 1 and f"skipped {bad}: " in proc.stderr and why in proc.stderr
            assert "Traceback" not in proc.stderr
        else:
            assert why in one_line_error(proc)


def test_an_invalid_trace_is_skipped_and_the_rest_renders(tmp_path):
    write_pair(tmp_path / "t", "aten::mkldnn_convolution", "aten::thnn_conv2d")
    doc = json.loads((tmp_path / "t" / "default.json").read_text())
    del doc["meta"]["framework"]
    (tmp_path / "t" / "no-framework.json").write_text(json.dumps(doc))
    doc["meta"]["framework"] = ["samplefw"]
    (tmp_path / "t" / "list-framework.json").write_text(json.dumps(doc))
    proc = dltrace("report", str(tmp_path / "t"), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    skipped = [line for line in proc.stderr.splitlines() if "skipped" in line]
    assert len(skipped) == 2 and "Traceback" not in proc.stderr
    assert any("no-framework.json: malformed trace (meta.framework is missing)" in line for line in skipped)
    assert any("list-framework.json: malformed trace (meta.framework must be a non-empty string, not list)" in line
               for line in skipped)
    assert "aten::thnn_conv2d" in (tmp_path / "r" / "samplefw.html").read_text()


def test_a_corrupt_trace_in_a_survey_folder_is_probed_again(fake_frameworks, tmp_path):
    args = ("survey", "crashy", "--primitives", "dense", "--no-native", "-o", str(tmp_path))
    assert dltrace(*args, env=fake_frameworks).returncode == 0
    (trace,) = (tmp_path / "traces").rglob("dense-functional.json")
    trace.write_bytes(BAD_DEFLATE)
    proc = dltrace(*args, env=fake_frameworks)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "crashy/cpu-default: 1 cases" in proc.stderr and "reused" not in proc.stderr
    assert load(trace).meta["primitive"] == "dense"


def test_a_probe_that_writes_a_corrupt_trace_is_a_gap(fake_frameworks, tmp_path):
    proc = dltrace("survey", "crashy", "--primitives", "maxpool2d", "--no-native", "-o", str(tmp_path),
                   env=fake_frameworks)
    assert proc.returncode == 0, proc.stderr
    assert "1 gaps" in proc.stdout
    _, gaps, _ = sv.read_folders([tmp_path / "traces"])
    assert [g.primitive for g in gaps] == ["maxpool2d"] and "the probe wrote an unreadable trace" in gaps[0].error
    assert not list((tmp_path / "traces").rglob("maxpool2d-functional.json"))


# ----------------------------------------------------------------------------- 4. a crash while py-spy samples


def test_a_crash_during_native_capture_is_a_gap_and_the_trace_says_why(fake_frameworks, tmp_path):
    proc = dltrace("survey", "crashy", "--primitives", "sigmoid", "-o", str(tmp_path), env=fake_frameworks)
    assert proc.returncode == 0, proc.stderr
    traces, gaps, _ = sv.read_folders([tmp_path / "traces"])
    # both traces are kept: the functional case and the kernel-shape case whose native layer was lost
    assert len(traces) == 2
    (gap,) = gaps
    assert gap.kind == "crashed" and gap.error.startswith("native layer lost: ") and "SIGSEGV" in gap.error
    (kernel,) = [t for t in traces if "native" in t.meta.get("layers_requested", [])]
    assert "SIGSEGV" in kernel.meta["native"]["error"] and kernel.layer("forward", "native") is None
    assert "SIGSEGV" in kernel.run("forward", "warm").stats["native_error"]
    assert "1 gaps" in proc.stdout


# ----------------------------------------------------------------------------- 6. unwritable outputs, full disk


@pytest.mark.parametrize("where", ["/proc/dltrace-out", "FILE/sub"])
def test_unwritable_outputs_are_found_before_probing(fake_frameworks, tmp_path, where):
    (tmp_path / "FILE").write_text("a file, not a folder")
    where = where.replace("FILE", str(tmp_path / "FILE"))
    good, _ = write_pair(tmp_path, "aten::mkldnn_convolution", "aten::thnn_conv2d")
    t0 = time.monotonic()
    for args in (["probe", "crashy", "relu", "-o", f"{where}/t.json"],  # relu hangs: it must never start
                 ["survey", "crashy", "--primitives", "relu", "-o", where],
                 ["report", str(tmp_path), "-o", where],
                 ["export", str(good), "--format", "collapsed", "-o", f"{where}/t.txt"]):
        line = one_line_error(dltrace(*args, env=fake_frameworks, timeout=60))
        assert f"cannot write {where.removesuffix('/sub')}" in line, line
    assert time.monotonic() - t0 < 60


@pytest.fixture
def full_disk(tmp_path):
    """A folder on a 128 KiB filesystem (tmpfs, as root), or where writing more than
    128 KiB to one file fails (a file-size limit): a full disk either way."""
    mount = tmp_path / "full"
    mount.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mount)],
                                                   capture_output=True).returncode == 0
    limit = None if mounted else (lambda: (signal.signal(signal.SIGXFSZ, signal.SIG_IGN),
                                           resource.setrlimit(resource.RLIMIT_FSIZE, (128 * 1024, 128 * 1024))))
    yield mount, limit
    if mounted:
        subprocess.run(["umount", str(mount)])


def test_a_full_disk_is_one_line_and_leaves_nothing_half_written(tmp_path, full_disk):
    folder, limit = full_disk
    # a report big enough to fill it: many primitives, each with a drawn graph
    for prim in ("conv2d", "relu", "dense", "tanh", "softmax", "sigmoid"):
        write_pair(tmp_path / "t" / prim, "aten::mkldnn_" + "x" * 3000, "aten::thnn_" + "y" * 3000, primitive=prim)
    out = folder / "r"
    proc = subprocess.run([DLTRACE, "report", str(tmp_path / "t"), "-o", str(out)], capture_output=True, text=True,
                          preexec_fn=limit, timeout=300)
    line = one_line_error(proc)
    assert "No space left on device" in line or "File too large" in line
    left = [p for p in folder.rglob("*") if p.is_file()]
    assert not [p for p in left if ".tmp" in p.name], left
    assert all(p.read_text().rstrip().endswith("</html>") for p in left if p.suffix == ".html")
    assert all(p.stat().st_size > 0 for p in left)


# ----------------------------------------------------------------------------- 7, 11. terminal safety


ESCAPES = "\x1b]0;pwned\x07\x1b[2J"


def test_escape_sequences_in_traces_never_reach_the_terminal(tmp_path):
    a, b = write_pair(tmp_path, "aten::mkldnn_convolution", f"aten::evil{ESCAPES}kernel")
    for env in ({}, {"FORCE_COLOR": "1", "TERM": "xterm-256color"}):  # a pipe, and a colour terminal
        proc = dltrace("diff", str(a), str(b), env=env)
        assert proc.returncode == 0, proc.stderr
        assert "\x1b]" not in proc.stdout and "\x1b[2J" not in proc.stdout and "\x07" not in proc.stdout
        assert "aten::evil\\x1b]0;pwned" in proc.stdout and "\\x1b[2Jkernel" in proc.stdout


def test_a_probes_stderr_is_made_safe(fake_frameworks):
    line = one_line_error(dltrace("probe", "crashy", "avgpool2d", env=fake_frameworks))
    assert "SIGSEGV" in line and "\x1b" not in line and "\\x1b]0;pwned" in line


def test_rich_markup_in_input_is_printed_as_it_is(tmp_path):
    line = one_line_error(dltrace("probe", "[/bold][red]x", "conv2d"), Exit.USAGE)
    assert "unknown framework '[/bold][red]x'" in line


def test_a_huge_name_does_not_flood_the_console(tmp_path):
    a, b = write_pair(tmp_path, "aten::mkldnn_convolution", "aten::" + "z" * 100_000)
    proc = dltrace("diff", str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout) < 20_000 and "chars)" in proc.stdout


def test_a_lone_surrogate_does_not_stop_the_output(tmp_path):
    a, b = write_pair(tmp_path, "aten::mkldnn_convolution", "aten::thnn_conv2d")
    b.write_text(b.read_text().replace("aten::thnn_conv2d", "aten::thnn\\udc80conv2d"))
    proc = dltrace("diff", str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    assert "aten::thnn\ufffdconv2d" in proc.stdout


# ----------------------------------------------------------------------------- 8. nothing left running


def _probe_pids(parent: int) -> list[int]:
    """Probe processes (the harness) started by ``parent``."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"tracer.collect.harness" in cmd:
            out.append(int(pid))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _sigint_as_at_a_terminal() -> None:
    """In the child: SIGINT at its default disposition. A background job of a
    non-interactive shell (`nohup make test &`) inherits SIGINT ignored, and so would
    the dltrace under test: Ctrl-C at a terminal is what these tests mean."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGKILL"])
@pytest.mark.parametrize("command", ["probe", "survey"])
def test_stopping_dltrace_stops_its_probes(fake_frameworks, tmp_path, command, how):
    args = ["probe", "crashy", "relu"] if command == "probe" else ["survey", "crashy", "--primitives", "relu",
                                                                    "--no-native", "-o", str(tmp_path)]
    proc = subprocess.Popen([DLTRACE, *args], env={**os.environ, **fake_frameworks}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_as_at_a_terminal)
    deadline = time.monotonic() + 60
    while not (probes := _probe_pids(proc.pid)):
        assert time.monotonic() < deadline and proc.poll() is None, "the probe never started"
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(getattr(signal, how))
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while any(map(_alive, probes)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(map(_alive, probes)), f"probe {probes} still running after dltrace got {how}"
    if how != "SIGKILL":  # dltrace's own handling: one line and the status of an interrupt
        assert proc.returncode == 130, (proc.returncode, proc.stderr)


@pytest.mark.slow
def test_the_interrupt_tests_pass_when_the_suite_starts_with_sigint_ignored(fake_frameworks, tmp_path):
    """`nohup make test &` from a non-interactive shell: pytest and everything it starts
    inherit SIGINT ignored. The test above must still mean Ctrl-C, so run it that way."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           f"{__file__}::test_stopping_dltrace_stops_its_probes[probe-SIGINT]"],
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN), capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).parent.parent, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_a_probe_leaves_no_temporary_folder(fake_frameworks, tmp_path):
    # the probe process's temporary folder is the runner's: whatever a framework leaves
    # there goes with it; crashy's dense case leaves one, as MXNet's profiler does
    env = {**fake_frameworks, "TMPDIR": str(tmp_path)}
    proc = dltrace("probe", "crashy", "dense", "--layers", "python", env=env)
    assert proc.returncode == 0, proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.frameworks
def test_mxnet_probe_leaves_no_profiler_folder(tmp_path):
    proc = dltrace("probe", "mxnet", "relu", "--pass", "forward", "--layers", "python,op",
                   env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "from mx.profiler" in proc.stdout  # the operator profiler ran
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- 11. options and files


@pytest.mark.parametrize("args", [
    ["probe", "torch", "conv2d", "--timeout", "0"], ["probe", "torch", "conv2d", "--timeout", "-5"],
    ["probe", "torch", "conv2d", "--timeout", "nan"], ["survey", "--timeout", "inf"],
    ["survey", "--jobs", "0"], ["survey", "--jobs", "-1"], ["probe", "torch", "conv2d", "--max-depth", "0"],
])
def test_impossible_option_values_are_refused(args):
    proc = dltrace(*args)
    assert proc.returncode == 2 and "Invalid value" in proc.stderr and "Traceback" not in proc.stderr


def test_a_damaged_external_json_is_one_line(tmp_path):
    (tmp_path / "external.json").write_text('["not", "a", "mapping"]')
    line = one_line_error(dltrace("probe", "torch", "conv2d", env={"DLTRACE_HOME": str(tmp_path)}))
    assert "external.json is damaged" in line


def test_env_use_of_a_folder_is_one_line(tmp_path):
    line = one_line_error(dltrace("env", "use", "torch", str(tmp_path), env={"DLTRACE_HOME": str(tmp_path)}))
    assert f"torch: {tmp_path} is not an executable Python interpreter" in line


# ----------------------------------------------------------------------------- round 3: bounded reads


#: Under this address-space limit (set in the child), reading what a file claims
#: instead of what it is allowed to be is a MemoryError, not an exhausted machine.
MEMORY_LIMIT = 4 << 30


def _limited(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`dltrace ARGS` with its address space limited to MEMORY_LIMIT."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    return subprocess.run([DLTRACE, *args], capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=timeout, stdin=subprocess.DEVNULL, preexec_fn=limit)


def _gzip_bomb(path: Path, gib: float) -> Path:
    """A gzip file of concatenated members (legal gzip) that expands to ``gib`` GiB of
    zeros behind a valid trace header, in a few MB."""
    member = gzip.compress(bytes(64 << 20), compresslevel=9)
    path.write_bytes(gzip.compress(b'{"format": "dltrace-trace", "version": 1, "meta": {"x": "')
                     + member * int(gib * 16))
    return path


@pytest.mark.slow
def test_a_decompression_bomb_is_one_line_in_every_command(tmp_path):
    good, _ = write_pair(tmp_path / "t", "aten::mkldnn_convolution", "aten::thnn_conv2d")
    bomb = _gzip_bomb(tmp_path / "t" / "bomb.json.gz", 5.8)
    zero = tmp_path / "t" / "zero.json"
    zero.symlink_to("/dev/zero")
    assert bomb.stat().st_size < 8 << 20
    for bad in (bomb, zero):
        for args in (["diff", str(bad), str(good)], ["export", str(bad), "--format", "collapsed"]):
            line = one_line_error(_limited(*args))
            assert ("MiB allowed" if bad == bomb else "a character device, not a file") in line
        line = one_line_error(_limited("diff", str(bad)))
        assert str(bad) in line and ("expands to more than the 256 MiB allowed" in line or "a character device" in line)
    proc = _limited("report", str(tmp_path / "t"), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert f"skipped {bomb}: not read: expands to more than" in proc.stderr
    assert f"skipped {zero}: not read: a character device, not a file" in proc.stderr
    assert "aten::thnn_conv2d" in (tmp_path / "r" / "samplefw.html").read_text()
    proc = _limited("audit", "torch", "--traces", str(tmp_path / "t"))
    assert "Traceback" not in proc.stderr and "skipped" in proc.stderr


@pytest.mark.slow
def test_a_survey_resumes_past_a_bomb_in_its_traces(fake_frameworks, tmp_path):
    args = ("survey", "crashy", "--primitives", "dense", "--no-native", "-o", str(tmp_path))
    assert dltrace(*args, env=fake_frameworks).returncode == 0
    (trace,) = (tmp_path / "traces").rglob("dense-functional.json")
    _gzip_bomb(trace, 5.8)
    proc = _limited(*args, env=fake_frameworks)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert load(trace).meta["primitive"] == "dense"  # probed again


def _tiny_event_profile(path: Path, events: int) -> Path:
    """A Kineto document of ``events`` tiny valid events, gzip members written once
    and repeated: ~890 MB of JSON in a few MB."""
    event = b'{"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 1, "dur": 1},'
    per = 1 << 16
    block = gzip.compress(event * per, compresslevel=9)
    path.write_bytes(gzip.compress(b'{"traceEvents": [') + block * (events // per)
                     + gzip.compress(event[:-1] + b"]}"))
    return path


@pytest.mark.slow
def test_importing_millions_of_tiny_events_is_bounded(tmp_path):
    src = _tiny_event_profile(tmp_path / "tiny.kineto.json.gz", 10_000_000)
    assert src.stat().st_size < 16 << 20
    line = one_line_error(_limited("import", str(src), "--framework", "torch", "-o", str(tmp_path / "o")))
    assert "JSON objects, more than the 1,000,000 an import reads" in line


# ----------------------------------------------------------------------------- round 3: names


def _named(folder: Path, name: str, **meta) -> Path:
    a, _ = write_pair(folder / name.encode().hex()[:40], "aten::mkldnn_convolution", "aten::thnn_conv2d",
                      framework=name, **meta)
    return a


def test_each_framework_name_gets_its_own_page_and_none_replaces_the_index(tmp_path):
    for name in ("torch", "torch!", "Torch", "index", "!!!", "graphs"):
        _named(tmp_path / "t", name)
    proc = dltrace("report", str(tmp_path / "t"), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    pages = sorted(p.name for p in (tmp_path / "r").glob("*.html"))
    assert len(pages) == 7 and "torch.html" in pages and "index.html" in pages, pages
    assert not [p for p in pages if p.startswith(".")]
    index = (tmp_path / "r" / "index.html").read_text()
    assert "<h1" in index and "dltrace survey" in index and "Gaps" in index  # the index, not a framework page
    assert "<title>torch · dltrace" in (tmp_path / "r" / "torch.html").read_text()
    links = re.findall(r'<a href="([^"#]+\.html)"><b>([^<]+)</b>', index)
    assert len({h for h, _ in links}) == 6 and all((tmp_path / "r" / h).exists() for h, _ in links)


@pytest.mark.parametrize("field", ["framework", "primitive", "variant", "api", "machine.cpu"])
def test_long_names_do_not_reach_file_names(tmp_path, field):
    long = "x" * 300
    meta = {"machine": {"arch": "x86_64", "cpu": long}} if field == "machine.cpu" else {field: long}
    write_pair(tmp_path / "t", "aten::mkldnn_convolution", "aten::thnn_conv2d", **meta)
    proc = dltrace("report", str(tmp_path / "t"), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert (tmp_path / "r" / "index.html").exists()
    assert max(len(p.name) for p in (tmp_path / "r").rglob("*")) < 120


# ----------------------------------------------------------------------------- round 3: gap records


@pytest.mark.parametrize("content, why", [
    ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
    ('{"framework": 1, "device": "cpu", "variant": "default", "primitive": "relu", "api": "functional", "error": "x"}',
     "field 'framework' is int, not a string"),
    ('{"device": "cpu"}', "missing field 'framework'"),
])
def test_a_bad_gap_record_is_one_line_and_the_rest_renders(tmp_path, content, why):
    write_pair(tmp_path / "t", "aten::mkldnn_convolution", "aten::thnn_conv2d", framework="torch")
    (tmp_path / "t" / "relu-functional.gap.json").write_text(content)
    for args in (["report", str(tmp_path / "t"), "-o", str(tmp_path / "r")],
                 ["audit", "torch", "--traces", str(tmp_path / "t")]):
        proc = dltrace(*args)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert proc.returncode == 0 and f"unreadable gap record ({why}" in proc.stderr, proc.stderr
    assert (tmp_path / "r" / "torch.html").exists()


# ----------------------------------------------------------------------------- round 3: library lines


def test_a_malformed_library_line_costs_no_case(fake_frameworks, tmp_path):
    out = tmp_path / "softmax.json"
    proc = dltrace("probe", "crashy", "softmax", "--layers", "python,library", "--pass", "forward", "-o", str(out),
                   env=fake_frameworks)
    assert proc.returncode == 0, proc.stderr
    run = load(out).run("forward")
    assert [n.frame.name for _, n in run.layers["library"].walk()][1:] == ["softmax jit:avx2 (forward_training)"]
    assert run.stats["layers"]["library"]["unreadable_lines"] == 3
    assert "python" in run.layers


# ----------------------------------------------------------------------------- round 3: standard output


@pytest.mark.parametrize("args", [["list"], ["diff", "{a}", "{b}"], ["export", "{a}", "--format", "collapsed"],
                                  ["import", "{kineto}", "--framework", "torch", "-o", "{out}"]])
def test_output_that_cannot_be_written_is_one_line(tmp_path, args):
    a, b = write_pair(tmp_path, "aten::mkldnn_convolution", "aten::thnn_conv2d")
    kineto = Path(__file__).parent.parent / "tracer" / "reference" / "imported" / "alexnet-a100.kineto.json.gz"
    args = [x.format(a=a, b=b, kineto=kineto, out=tmp_path / "o") for x in args]
    closed = subprocess.run([DLTRACE, *args], capture_output=False, stderr=subprocess.PIPE, text=True, timeout=300,
                            stdin=subprocess.DEVNULL, preexec_fn=lambda: os.close(1))
    assert closed.returncode == 1 and "Traceback" not in closed.stderr, closed.stderr
    assert closed.stderr.strip().splitlines()[-1] == "dltrace: error: cannot write to standard output: it is closed"
    with open("/dev/full", "w") as full:
        proc = subprocess.run([DLTRACE, *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot write to standard output: No space left on device" in proc.stderr


def test_a_closed_pipe_ends_quietly(tmp_path):
    proc = subprocess.run(f"'{DLTRACE}' list | head -1", shell=True, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.stderr == "" and proc.stdout.count("\n") == 1
    # a reader gone before the first line: the status says so (rich's own handler exits 1, a failure)
    proc = subprocess.run(["bash", "-c", f"'{DLTRACE}' list | true; exit ${{PIPESTATUS[0]}}"], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == Exit.BROKEN_PIPE and proc.stderr == "", (proc.returncode, proc.stderr)


# ----------------------------------------------------------------------------- round 3: pipes, bidi, import


def test_a_named_pipe_is_never_read(tmp_path):
    write_pair(tmp_path / "t", "aten::mkldnn_convolution", "aten::thnn_conv2d")
    os.mkfifo(tmp_path / "t" / "pipe.json")
    proc = dltrace("report", str(tmp_path / "t"), "-o", str(tmp_path / "r"), timeout=120)
    assert proc.returncode == 0 and "pipe.json: not read: a named pipe, not a file" in proc.stderr
    line = one_line_error(dltrace("import", str(tmp_path / "t" / "pipe.json"), "--framework", "torch",
                                  "-o", str(tmp_path / "o"), timeout=120))
    assert "is a named pipe, not a file" in line


def test_bidirectional_controls_are_inert_in_the_report(tmp_path):
    write_pair(tmp_path / "t", "aten::mkldnn_convolution", "aten::evil\u202ekernel\u2066x")
    proc = dltrace("report", str(tmp_path / "t"), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    for page in (tmp_path / "r").rglob("*.html"):
        text = page.read_text()
        assert "\u202e" not in text and "\u2066" not in text, page
    assert "aten::evil\\u202ekernel\\u2066x" in (tmp_path / "r" / "samplefw.html").read_text()


def test_each_imported_file_stands_alone(tmp_path):
    ref = Path(__file__).parent.parent / "tracer" / "reference" / "imported"
    garbage = tmp_path / "garbage.json.gz"
    garbage.write_bytes(BAD_DEFLATE)
    proc = dltrace("import", str(ref / "alexnet-a100.kineto.json.gz"), str(garbage),
                   str(ref / "mlp-train-mi250.kineto.json.gz"), "--framework", "torch", "-o", str(tmp_path / "o"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("dltrace: error: ") and "garbage.json.gz" in line
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["alexnet-a100", "mlp-train-mi250"]
    assert list((tmp_path / "o" / "alexnet-a100").glob("*-imported.json"))
    assert list((tmp_path / "o" / "mlp-train-mi250").glob("*-imported.json"))


# ----------------------------------------------------------------------------- round 3: surveys, terminals, duplicates


def test_a_folder_where_a_trace_goes_is_that_cases_gap(fake_frameworks, tmp_path):
    job_dir = tmp_path / "traces" / "crashy" / "cpu-default"
    (job_dir / "dense-functional.json").mkdir(parents=True)
    proc = dltrace("survey", "crashy", "--primitives", "dense,softmax", "--no-native", "-o", str(tmp_path),
                   env=fake_frameworks)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert load(job_dir / "softmax-functional.json").meta["primitive"] == "softmax"
    _, gaps, _ = sv.read_folders([tmp_path / "traces"])
    assert [(g.primitive, g.kind) for g in gaps] == [("dense", "output")] and "is not a file" in gaps[0].error


def test_a_narrow_terminal_gets_records_not_empty_cells():
    proc = dltrace("list", env={"COLUMNS": "20"})
    assert proc.returncode == 0, proc.stderr
    assert "│  │" not in proc.stdout
    for name in ("torch", "tensorflow", "chainer", "mxnet", "jax"):
        assert re.search(rf"^{name}$", proc.stdout, re.M), proc.stdout


def test_an_ascii_terminal_gets_escapes_not_a_codec_error(tmp_path):
    a, b = write_pair(tmp_path, "aten::mkldnn_convolution", "aten::thnn_conv2d\u00e9")
    proc = dltrace("diff", str(a), str(b), env={"PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "aten::thnn_conv2d\\xe9" in proc.stdout and "split" in proc.stdout


@pytest.mark.slow
def test_a_page_lists_a_bounded_number_of_kernels(tmp_path):
    kids = [Node(Frame("op", "aten", f"aten::kernel_{i}"), 1, 10) for i in range(100_000)]
    for variant, children in (("default", [op("aten::mkldnn_convolution")]), ("fast", kids)):
        tree = Node(Frame("root", "", "conv2d.forward"), 1, 3000,
                    children=[op("aten::conv2d",
                                 Node(Frame("op", "aten", "aten::_convolution"), 1, 10, children=children))])
        save(Trace({**META, "variant": variant}, [Run("forward", "warm", {"op": tree}, {"untraced_s": 1e-4})]),
             tmp_path / "t" / f"{variant}.json") if (tmp_path / "t").mkdir(exist_ok=True) is None else None
    proc = dltrace("report", str(tmp_path / "t"), "-o", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    assert sum(p.stat().st_size for p in (tmp_path / "r").rglob("*.html")) < 2 << 20


def test_the_same_trace_twice_counts_once(tmp_path):
    write_pair(tmp_path / "t", "aten::mkldnn_convolution", "aten::thnn_conv2d")
    (tmp_path / "copy").mkdir()
    for p in (tmp_path / "t").iterdir():
        (tmp_path / "copy" / p.name).write_bytes(p.read_bytes())
    once, _, _ = sv.read_folders([tmp_path / "t"])
    thrice, _, _ = sv.read_folders([tmp_path / "t", tmp_path / "t", tmp_path / "copy"])
    assert len(once) == len(thrice) == 2
    single = dltrace("report", str(tmp_path / "t"), "-o", str(tmp_path / "r1"))
    triple = dltrace("report", str(tmp_path / "t"), str(tmp_path / "t"), str(tmp_path / "copy"),
                     "-o", str(tmp_path / "r3"))
    assert single.returncode == triple.returncode == 0
    count = lambda r: (tmp_path / r / "samplefw.html").read_text().count("split point(s)")  # noqa: E731
    assert count("r1") == count("r3") >= 1
