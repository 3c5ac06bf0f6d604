"""The native collector's parsing, on py-spy output captured from real probe loops
(tests/data: torch conv2d with oneDNN JIT kernels; TensorFlow conv2d with bogus
frames from failed unwinds, and py-spy's warnings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracer.collect import attribution, maps, pyspy_format, sampler
from tracer.processing.tags import isa_of, library_of
from tracer.knowledge import knowledge
from tracer.trace import Frame

K = knowledge()

DATA = Path(__file__).parent / "data"


def _maps(name: str) -> maps.Maps:
    out = []
    for line in (DATA / name).read_text().splitlines():
        parts = line.split(None, 5)
        lo, hi = parts[0].split("-")
        out.append(maps.Mapping(int(lo, 16), int(hi, 16), parts[1], parts[5].strip() if len(parts) > 5 else ""))
    return maps.Maps(out)


def _groups(name: str):
    samples = pyspy_format.parse_raw((DATA / f"{name}.raw").read_text())
    namer = attribution.FrameNamer(_maps(f"{name}.maps"),
                                   ["/home/user/.cache/dltrace/envs/torch/lib/python3.11/site-packages",
                                    "/home/user/.cache/dltrace/envs/tensorflow/lib/python3.11/site-packages"])
    return samples, attribution.split_by_marker(samples, ["_dltrace_native_0_forward", "_dltrace_native_0_backward"],
                                                namer)


@pytest.mark.parametrize("text, expect", [
    ("<module> (t1.py:12)", pyspy_format.RawFrame("<module>", "t1.py", True, 12)),
    ("Convolution (<string>:43)", pyspy_format.RawFrame("Convolution", "<string>", True, 43)),
    ("at::native::conv2d_symint (/x/libtorch_cpu.so)",
     pyspy_format.RawFrame("at::native::conv2d_symint", "/x/libtorch_cpu.so", False)),
    # C++ symbols carry parentheses: the library is the last group
    ("std::_Function_handler<void (int, int), f(ctx const&) const::{lambda(int, int)#1}>::_M_invoke (libtorch_cpu.so)",
     pyspy_format.RawFrame("std::_Function_handler<void (int, int), f(ctx const&) const::"
                           "{lambda(int, int)#1}>::_M_invoke",
                           "libtorch_cpu.so", False)),
    ("0x7eff16aab032 (?)", pyspy_format.RawFrame("0x7eff16aab032", "?", False)),
    # a native function of a library with debug info: its source file, not a Python frame
    ("_ctypes_callproc (callproc.c:1186)", pyspy_format.RawFrame("_ctypes_callproc", "callproc.c", False, 1186)),
    ("<module> (<frozen runpy>:88)", pyspy_format.RawFrame("<module>", "<frozen runpy>", True, 88)),
    ("0x7f234624524a (libc.so.6)", pyspy_format.RawFrame("0x7f234624524a", "libc.so.6", False)),
])
def test_parse_frame(text, expect):
    assert pyspy_format.parse_frame(text) == expect


def test_parse_raw_lines_and_counts():
    samples = pyspy_format.parse_raw("a (x.py:1);b (libb.so) 3\n\nnot a sample\nc (y.py:2) 1\n")
    assert [(len(s), n) for s, n in samples] == [(2, 3), (1, 1)]
    assert samples[0][0][1] == pyspy_format.RawFrame("b", "libb.so", False)


def test_torch_sample_splits_by_marker_and_keeps_jit_code():
    samples, (groups, outside) = _groups("pyspy_torch_conv2d")
    fwd, bwd = groups["_dltrace_native_0_forward"], groups["_dltrace_native_0_backward"]
    total = sum(n for _, n in samples)
    assert fwd.samples > 0 and bwd.samples > 0 and outside > 0
    assert fwd.samples + bwd.samples + outside == total
    # oneDNN's generated kernels: an executable anonymous mapping, kept as JIT code under its caller
    assert bwd.jit > 0 and bwd.bad_frames == 0
    jit_parents = {frames[i - 1].name for frames, _ in bwd.stacks for i, f in enumerate(frames)
                   if f.lib == maps.JIT_LIB}
    assert any("jit_avx2_convolution" in p or "_M_invoke" in p or "parallel" in p for p in jit_parents), jit_parents
    # frames below the marker only, and none of dltrace's own code
    for frames, _ in fwd.stacks + bwd.stacks:
        assert not any(f.kind == "python" and f.module.startswith(("tracer.", "probes.")) for f in frames)
    # the native frames hang under the Python frame that called into C (here the capture script's lambda)
    first_native = {next(f for f in frames if f.kind == "native") for frames, _ in fwd.stacks}
    assert first_native == {Frame("native", "", "torch::autograd::THPVariable_conv2d", lib="libtorch_python.so")}
    names = {f.name for frames, _ in fwd.stacks for f in frames}
    assert "at::native::mkldnn_convolution" in names
    libs = {f.lib for frames, _ in fwd.stacks for f in frames if f.kind == "native"}
    assert "libtorch_cpu.so" in libs and not any("/" in lib for lib in libs)


def test_tf_sample_drops_bogus_frames_and_counts_them():
    samples, (groups, _) = _groups("pyspy_tf_conv2d")
    fwd = groups["_dltrace_native_0_forward"]
    assert fwd.bad_frames > 0  # heap/stack addresses from failed unwinds
    for frames, _ in fwd.stacks:
        assert not any(f.name.startswith("0x") for f in frames)
    # Python frames keep their module (from the file, relative to site-packages) and first line
    py = [f for frames, _ in fwd.stacks for f in frames if f.kind == "python"]
    assert any(f.module == "tensorflow.python.ops.nn_ops" and f.file.startswith("tensorflow/") and f.line for f in py)


def test_build_tree_counts_samples_per_context():
    a, b, c = (Frame("native", "", n, lib="l.so") for n in "abc")
    tree = attribution.build_tree([([a, b], 3), ([a, c], 2), ([a, b], 1), ([], 4)], Frame("root", "", "conv2d.forward"))
    assert tree.count == 10
    (na,) = tree.children
    assert na.count == 6 and {(k.frame.name, k.count) for k in na.children} == {("b", 4), ("c", 2)}


def test_maps_classify():
    m = maps.Maps([maps.Mapping(0x1000, 0x2000, "rwxp", ""), maps.Mapping(0x2000, 0x3000, "r-xp", "/lib/libm.so.6"),
                   maps.Mapping(0x3000, 0x4000, "rw-p", "[heap]")])
    assert m.classify(0x1800) == (maps.JIT_NAME, maps.JIT_LIB)
    assert m.classify(0x2800) == (maps.UNKNOWN_NAME, "libm.so.6")
    assert m.classify(0x3800) is None and m.classify(0x10) is None


def test_warnings_are_timed_unwinding_errors():
    warns = pyspy_format.parse_warnings((DATA / "pyspy_tf_conv2d.log").read_text())
    assert len(warns) == 6
    assert all(t > 1.7e9 for t, _ in warns) and warns == sorted(warns)
    assert {pyspy_format.error_kind(m) for _, m in warns} <= {"merge", "UNW_EBADREG", "UNW_EINVAL"}


def test_perf_map_names_jit_code(tmp_path):
    # oneDNN's perf map: "START SIZE name.N" (hex), one line per generated kernel
    path = tmp_path / "perf-1.map"
    path.write_text("1000 200 jit_brgemm_kernel_t.0\n1400 100 jit_avx_gemm_f32_xbyak_gemm.12\nnot a line\n")
    kernels = maps.PerfMap.read(str(path))
    m = maps.Maps([maps.Mapping(0x1000, 0x2000, "r-xp", "")], kernels)
    assert m.classify(0x1010) == ("jit_brgemm_kernel_t", maps.JIT_LIB)  # the per-process number is dropped
    assert m.classify(0x14ff) == ("jit_avx_gemm_f32_xbyak_gemm", maps.JIT_LIB)
    assert m.classify(0x1300) == (maps.JIT_NAME, maps.JIT_LIB)  # JIT code the map does not name
    assert maps.PerfMap.read(str(tmp_path / "missing.map")).entries == []
    named, unnamed = Frame("native", "", "jit_t", lib="[jit]"), Frame("native", "", maps.JIT_NAME, lib="[jit]")
    assert (library_of(named, k=K), isa_of(named, k=K)) == ("oneDNN", "jit")
    assert library_of(Frame("native", "", "jit_avx2_conv_fwd_kernel_f32_t", lib="[jit]"), k=K) == "oneDNN"
    assert isa_of(Frame("native", "", "jit_avx2_conv_fwd_kernel_f32_t", lib="[jit]"), k=K) == "avx2"
    assert (library_of(unnamed, k=K), isa_of(unnamed, k=K)) == ("JIT code", "jit")


def test_ptrace_opt_in_and_hint():
    # under Yama's ptrace_scope=1 the probe must opt in for its py-spy child to attach;
    # without Yama the kernel refuses PR_SET_PTRACER (EINVAL) and the call says so, harmlessly
    assert sampler.allow_ptrace_by_any() == Path("/proc/sys/kernel/yama").is_dir()
    assert sampler.ptrace_hint("Failed to attach: Operation not permitted (os error 1)").startswith(" (")
    assert sampler.ptrace_hint("No such process") == ""


def test_own_code_is_never_a_sampled_frame_in_the_package_or_through_its_link(tmp_path):
    # the probe process imports the package through the link the runner makes
    # (tracer.paths.code_path): a frame of its probes (tracer/probes) is dltrace's own
    # code whether py-spy names it by the link or by the real file
    import subprocess
    import sys

    from tracer.paths import PACKAGE, code_path

    code = code_path(tmp_path)
    script = (
        "import sys\n"
        "from tracer.collect import attribution\n"
        "from tracer.collect.pyspy_format import RawFrame\n"
        "assert attribution.__file__.startswith(sys.argv[1]), attribution.__file__\n"
        "for where in sys.argv[1:]:\n"
        "    print(attribution._own(RawFrame('make_case', where + '/tracer/probes/torch.py', True, 1)),\n"
        "          attribution._own(RawFrame('relu', where + '/torch/nn/functional.py', True, 1)))\n")
    # -S: no site-packages, so the package is found only through the link, as in the probe process
    proc = subprocess.run([sys.executable, "-S", "-c", script, str(code), str(PACKAGE.parent)], capture_output=True,
                          text=True, env={"PYTHONPATH": str(code)}, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False", "True", "False"]
