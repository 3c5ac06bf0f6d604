"""`dltrace scaffold torch`: a PrivateUse1 backend skeleton that registers exactly what
the stand-in run says a backend must implement, and its check. One session-scoped
LeNet skeleton, written and checked by the real command; the tests read it, check
edited copies of it, and compare its list with a stand-in probe of their own."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import dltrace, edited_skeleton, one_line_error, skeleton_ops
from tracer import envs
from tracer.contract import Exit
from tracer.paths import PACKAGE
from tracer.trace import load

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def lenet_skeleton(frameworks, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    folder = tmp_path_factory.mktemp("scaffold") / "lenet"
    proc = dltrace("scaffold", "torch", "--model", "lenet", "-o", str(folder), "--check", timeout=600)
    return folder, proc


def _check(folder: Path) -> subprocess.CompletedProcess:
    return dltrace("scaffold", "torch", "-o", str(folder), "--check", timeout=600)


def _edited(skeleton: Path, tmp_path: Path, old: str, new: str) -> Path:
    return edited_skeleton(skeleton, tmp_path, "mydevice/kernels.py", old, new)


def test_the_lenet_skeleton_passes_its_check(lenet_skeleton):
    folder, proc = lenet_skeleton
    assert proc.returncode == Exit.OK, proc.stderr
    ops = skeleton_ops(folder)
    for api in ("functional", "layer"):
        assert re.search(rf"lenet \({api}\): 2 steps match the CPU: the loss, 10 gradients and the parameters "
                         "after the update", proc.stdout), proc.stdout
    assert f"{len(ops)} ops, each needed" in proc.stdout, proc.stdout
    # what it wrote: the device's plumbing is dltrace's own file, as it is
    assert (folder / "mydevice" / "device.py").read_bytes() == (PACKAGE / "probes" / "torch_device.py").read_bytes()
    readme = (folder / "README.md").read_text()
    assert "torch 2." in readme and "dltrace scaffold torch --model lenet" in readme


def test_the_list_is_the_standin_runs(lenet_skeleton, frameworks, tmp_path):
    """ops.txt is what reached the stand-in device in LeNet's training step at both levels
    (a probe of its own), with the passes that reached each."""
    folder, _ = lenet_skeleton
    reached: dict[str, set[str]] = {}
    for api in ("functional", "layer"):
        proc = dltrace("probe", "torch", "lenet", "--api", api, "--device", "standin", "--layers", "python,op",
                       "-o", str(tmp_path / f"{api}.json"))
        assert proc.returncode == 0, proc.stderr
        for pass_, ops in load(tmp_path / f"{api}.json").meta["standin"]["reached"].items():
            for op in ops:
                reached.setdefault(op, set()).add(pass_)
    assert {op: sorted(p) for op, p in skeleton_ops(folder).items()} == {op: sorted(p) for op, p in reached.items()}
    assert {"aten::convolution_overrideable", "aten::addmm.out", "aten::_copy_from"} <= set(reached)


def test_the_kernels_register_exactly_the_ops_of_ops_txt(lenet_skeleton, frameworks):
    folder, _ = lenet_skeleton
    script = (
        "import sys, torch\n"
        f"sys.path.insert(0, {str(folder)!r})\n"
        "import mydevice\n"
        "dev = mydevice.install()\n"
        "print('\\n'.join(sorted(mydevice.KERNELS)))\n"
        "own = [op for op in mydevice.KERNELS if torch._C._dispatch_has_kernel_for_dispatch_key(op, 'PrivateUse1')]\n"
        "print('registered', len(own))\n"
        "try:\n"
        "    torch.ones(3, device=dev).cos()\n"
        "except NotImplementedError as e:\n"
        "    print('refused', e)\n")
    proc = subprocess.run([str(envs.python_for(frameworks["torch"])), "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    ops = sorted(skeleton_ops(folder))
    assert lines[:len(ops)] == ops
    assert f"registered {len(ops)}" in lines
    # an op off the list (torch.ones is on it: empty.memory_format, fill_.Scalar) is refused by name
    assert "refused mydevice: aten::cos.out is not implemented (not on the must-implement list)" in lines


@pytest.mark.parametrize("op", ["aten::addmm.out", "aten::convolution_overrideable"])
def test_a_skeleton_without_one_op_fails_its_check_naming_it(lenet_skeleton, tmp_path, op):
    """A fallback refuses addmm.out; convolution_overrideable (routed to new backends by
    name) meets torch's own "not implemented" kernel: either way the op is named."""
    folder, _ = lenet_skeleton
    function = re.sub(r"\W", "_", op.split("::")[1])
    line = one_line_error(_check(_edited(folder, tmp_path, f'    "{op}": {function},\n', "")))
    assert "check failed: lenet (functional)" in line and op.split("::")[1].split(".")[0] in line, line


def test_a_kernel_that_computes_otherwise_fails_the_check(lenet_skeleton, tmp_path):
    folder, _ = lenet_skeleton
    edited = _edited(folder, tmp_path, "torch.ops.aten.relu.default, args", "torch.ops.aten.sigmoid.default, args")
    line = one_line_error(_check(edited))
    assert "differs from the CPU's" in line, line


def test_a_kernel_beyond_the_list_fails_the_check_as_not_needed(lenet_skeleton, tmp_path):
    folder, _ = lenet_skeleton
    edited = _edited(folder, tmp_path, "#: the must-implement list as written",
                     'KERNELS["aten::cos"] = lambda *a, **k: device.on_cpu(torch.ops.aten.cos.default, a, k)\n'
                     "#: the must-implement list as written")
    line = one_line_error(_check(edited))
    assert "aten::cos is not needed" in line, line


# ----------------------------------------------------------------------------- bad input (no framework)

def test_an_unknown_model_is_a_usage_error(tmp_path):
    line = one_line_error(dltrace("scaffold", "torch", "--model", "nope", "-o", str(tmp_path / "x")), Exit.USAGE)
    assert "unknown model 'nope'" in line and "lenet" in line
    assert not (tmp_path / "x").exists()


def test_a_framework_that_cannot_be_stood_in_names_its_interface(tmp_path):
    """Chainer and MXNet: named, not written (TensorFlow's table: test_scaffold_tables)."""
    line = one_line_error(dltrace("scaffold", "chainer", "--model", "lenet", "-o", str(tmp_path / "x")), Exit.USAGE)
    assert "ChainerX backend" in line
    line = one_line_error(dltrace("scaffold", "mxnet", "--model", "lenet", "-o", str(tmp_path / "x")), Exit.USAGE)
    assert "MXLoadLib" in line and not (tmp_path / "x").exists()


def test_a_missing_environment_and_a_folder_in_use_are_one_line(tmp_path):
    env = {"DLTRACE_HOME": str(tmp_path / "empty-home")}
    line = one_line_error(dltrace("scaffold", "torch", "--model", "lenet", "-o", str(tmp_path / "x"), env=env))
    assert "dltrace env setup torch" in line and not (tmp_path / "x").exists()
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "kernels.py").write_text("# a team's work\n")
    line = one_line_error(dltrace("scaffold", "torch", "--model", "lenet", "-o", str(tmp_path / "used"), env=env))
    assert "not empty" in line and (tmp_path / "used" / "kernels.py").read_text() == "# a team's work\n"
    line = one_line_error(dltrace("scaffold", "torch", "-o", str(tmp_path / "used"), "--check", env=env))
    assert "holds no skeleton" in line


def test_a_check_that_prints_without_end_costs_only_its_tail(tmp_path, monkeypatch):
    """The check's output is streamed to files and read back by its tail: 48 MiB printed
    costs dltrace's process kilobytes, and the reason is still its last line."""
    import sys
    import tracemalloc

    from tracer import registry
    from tracer import scaffold as sc

    (tmp_path / sc.MANIFEST).write_text("{}")
    (tmp_path / "check.py").write_text("import sys\nline = 'x' * 1023 + '\\n'\nfor _ in range(48 * 1024):\n"
                                       "    sys.stdout.write(line)\n    sys.stderr.write(line)\n"
                                       "sys.exit('check failed: the last line')\n")
    monkeypatch.setattr(envs, "python_for", lambda fw: Path(sys.executable))
    torch = registry.load()["torch"]
    tracemalloc.start()
    try:
        result = sc.check(torch, tmp_path, timeout=120)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not result.ok and result.reason == "the last line"
    assert peak < 2 << 20, peak  # kept whole, the output would be 96 MiB, twice
    assert "bytes of the check's output left out" in result.lines[0]
    assert sum(len(line) + 1 for line in result.lines) < sc.OUTPUT_TAIL + 200
