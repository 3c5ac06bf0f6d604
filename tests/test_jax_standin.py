"""JAX's stand-in device and `dltrace scaffold jax`: the step's StableHLO programs run
op by op by dltrace's consumer (each op alone compiled by XLA:CPU), what they executed
recorded per pass and checked against JAX's own run; the skeleton's op table holds
exactly that list and its check proves it. One session-scoped LeNet skeleton, written
and checked by the real command; the tests read it, check edited copies of it, and
compare its list with a stand-in probe of their own."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import dltrace, edited_skeleton, one_line_error, skeleton_ops
from tracer.contract import STANDIN_LIB, Exit
from tracer.paths import PACKAGE
from tracer.trace import load


@pytest.fixture(scope="session")
def jax_lenet_skeleton(frameworks, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    folder = tmp_path_factory.mktemp("scaffold-jax") / "lenet"
    return folder, dltrace("scaffold", "jax", "--model", "lenet", "-o", str(folder), "--check", timeout=900)


def _edited(skeleton: Path, tmp_path: Path, old: str, new: str) -> Path:
    return edited_skeleton(skeleton, tmp_path, "mydevice/ops.py", old, new)


def _check(folder: Path) -> subprocess.CompletedProcess:
    return dltrace("scaffold", "jax", "-o", str(folder), "--check", timeout=900)


def test_the_jax_lenet_skeleton_passes_its_check(jax_lenet_skeleton):
    folder, proc = jax_lenet_skeleton
    assert proc.returncode == Exit.OK, proc.stderr
    ops = skeleton_ops(folder)
    for api in ("functional", "layer"):
        assert re.search(rf"lenet \({api}\): 2 steps match JAX: each of the 3 program\(s\)", proc.stdout), proc.stdout
    assert f"{len(ops)} ops, each needed" in proc.stdout, proc.stdout
    assert f"mydevice/ops.py holds {len(ops)} StableHLO ops" in proc.stdout
    # the consumer is dltrace's own file, as it is; the table is exactly ops.txt
    assert (folder / "mydevice" / "consumer.py").read_bytes() == (PACKAGE / "probes" / "jax_standin.py").read_bytes()
    table = re.findall(r'^    "([\w.]+)": (\w+),$', (folder / "mydevice" / "ops.py").read_text(), re.M)
    assert [op for op, _ in table] == list(ops)
    assert {"stablehlo.convolution", "stablehlo.reduce_window", "stablehlo.select_and_scatter",
            "stablehlo.dot_general"} <= set(ops)
    manifest = json.loads((folder / "scaffold.json").read_text())
    assert manifest["framework"] == "jax" and manifest["made_by"]["evidence"] == "run on the stand-in device"
    assert "NOT RUN" not in (folder / "README.md").read_text()


def test_the_list_is_the_standin_probes(jax_lenet_skeleton, tmp_path):
    """A stand-in probe of LeNet's two levels reaches exactly the skeleton's ops, per pass;
    its op layer names each op under the program that ran it, marked as the stand-in's."""
    folder, _ = jax_lenet_skeleton
    reached: dict[str, set[str]] = {}
    for api in ("functional", "layer"):
        out = tmp_path / f"{api}.json"
        proc = dltrace("probe", "jax", "lenet", "--api", api, "--device", "standin", "--layers", "python,op",
                       "-o", str(out), timeout=600)
        assert proc.returncode == 0, proc.stderr
        t = load(out)
        assert t.info.standin is not None and t.info.standin.evidence == "run on the stand-in device"
        for pass_, ops in t.info.standin.reached.items():
            reached.setdefault(pass_, set()).update(ops)
        backward = t.run("backward", "warm").layers["op"]
        programs = [c.frame.name for c in backward.children]
        assert programs[0] == "vjp_backward" and len(programs) == 2, programs  # the pullback, then the update
        leaves = [n for _, n in backward.walk() if n.frame.lib == STANDIN_LIB]
        assert leaves and all(n.frame.name.startswith(("stablehlo.", "chlo.")) for n in leaves)
    ops = skeleton_ops(folder)
    assert set(ops) == reached["forward"] | reached["backward"]
    for op, passes in ops.items():
        assert set(passes) == {p for p in ("forward", "backward") if op in reached[p]}, op


@pytest.mark.parametrize("op", ["stablehlo.reduce_window", "stablehlo.select_and_scatter"])
def test_a_skeleton_without_one_op_fails_its_check_naming_it(jax_lenet_skeleton, tmp_path, op):
    folder, _ = jax_lenet_skeleton
    name = op.split(".", 1)[1]
    copy = _edited(folder, tmp_path, f'    "{op}": {name},\n', "")
    line = one_line_error(_check(copy), Exit.ERROR)
    assert f"reached {op}: no kernel in the op table" in line, line


def test_a_kernel_that_computes_otherwise_fails_the_check(jax_lenet_skeleton, tmp_path):
    folder, _ = jax_lenet_skeleton
    copy = _edited(folder, tmp_path, '''    """stablehlo.exponential (forward). Replace the body with your kernel."""
    return cpu(op, inputs)''', '''    """stablehlo.exponential (forward). Replace the body with your kernel."""
    return [2 * out for out in cpu(op, inputs)]''')
    line = one_line_error(_check(copy), Exit.ERROR)
    assert re.search(r"lenet \(functional\): step 1, forward program 1 \(\w+\): output \d+ differs from JAX's", line), \
        line


def test_a_kernel_beyond_the_list_fails_the_check_as_not_needed(jax_lenet_skeleton, tmp_path):
    folder, _ = jax_lenet_skeleton
    copy = _edited(folder, tmp_path, "KERNELS = {\n", 'KERNELS = {\n    "stablehlo.cosine": cpu,\n')
    line = one_line_error(_check(copy), Exit.ERROR)
    assert "stablehlo.cosine is not needed: every step runs without its kernel" in line, line


def test_a_primitive_on_the_standin_records_what_ran_per_pass(frameworks, tmp_path):
    """The exact GELU's CHLO op (``chlo.erfc``) reaches the stand-in as JAX emits it (no rewrite), and the
    stand-in's outputs are JAX's (the probe fails otherwise)."""
    out = tmp_path / "gelu.json"
    proc = dltrace("probe", "jax", "gelu", "--device", "standin", "--layers", "python,op", "-o", str(out),
                   timeout=600)
    assert proc.returncode == 0, proc.stderr
    t = load(out)
    assert t.info.standin is not None
    assert "chlo.erfc" in t.info.standin.reached["forward"], t.info.standin.reached
    assert t.info.standin.unit and "StableHLO" in t.info.standin.unit


def test_a_users_workload_gets_its_skeleton_proved(frameworks, tmp_path):
    """A workload's programs (read as its passes dispatch them, with their arguments'
    values) run on the skeleton and match JAX in two steps: stax's CNN trained by
    ``optimizers.adam``, whose update takes the step counter as a Python int (a weak
    int32 to the program) and the optimizer state as a pytree; the backward pass (the
    pullback, then the update) is on the list."""
    workload = Path(__file__).parent / "workloads" / "jax_stax_adam.py"
    proc = dltrace("scaffold", "jax", "--workload", str(workload), "-o", str(tmp_path / "sk"), "--check", timeout=900)
    assert proc.returncode == Exit.OK, proc.stderr
    assert "jax_stax_adam (user): 2 steps match JAX: each of the 4 program(s)" in proc.stdout, proc.stdout
    assert re.search(r"forward \d+, backward \d+", proc.stdout) and "backward 0" not in proc.stdout, proc.stdout
    ops = skeleton_ops(tmp_path / "sk")
    assert {"stablehlo.convolution", "stablehlo.transpose", "stablehlo.sqrt"} <= set(ops), ops
    assert f"{len(ops)} ops, each needed" in proc.stdout


def test_typed_keys_and_donated_buffers_run_on_the_standin(frameworks, tmp_path):
    """Every program of both passes runs on the stand-in: a typed key's program takes its
    key data, a donated buffer was copied before the call gave it away."""
    out = tmp_path / "keys.json"
    proc = dltrace("probe", "jax", "--workload", str(Path(__file__).parent / "workloads" / "jax_keys_donated.py"),
                   "--device", "standin", "--layers", "op", "-o", str(out), timeout=600)
    assert proc.returncode == 0 and "not captured" not in proc.stdout, proc.stdout + proc.stderr
    reached = load(out).info.standin.reached
    assert "stablehlo.rng_bit_generator" in reached["forward"] or "stablehlo.shift_right_logical" in reached["forward"]
    assert reached["backward"], reached


def test_a_list_that_lost_a_pass_is_no_list(frameworks, tmp_path):
    """The forward program calls back into Python, which the stand-in cannot run: the
    audit prints what ran as incomplete and exits 1 naming the pass and the reason, with
    no table written, and scaffold writes no skeleton from it."""
    workload = str(Path(__file__).parent / "workloads" / "jax_callback.py")
    table = tmp_path / "ops.csv"
    proc = dltrace("audit", "jax", "--workload", workload, "--traces", str(tmp_path / "none"), "-o", str(table),
                   timeout=900)
    assert proc.returncode == Exit.ERROR and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]  # after the derived GPU path's gap (the callback lowers for no GPU)
    assert line.startswith("dltrace: error: jax_callback: no must-implement list: jax_callback (user) forward did "
                           "not run whole on the standin device: ProbeError: the stand-in could not run program 1 of "
                           "the forward pass"), line
    assert "backward" not in line  # the backward's program ran: only the lost pass is named
    assert "INCOMPLETE" in proc.stdout and "what a jax backend must implement" not in proc.stdout, proc.stdout
    assert not table.exists()
    proc = dltrace("scaffold", "jax", "--workload", workload, "-o", str(tmp_path / "sk"), timeout=900)
    line = one_line_error(proc, Exit.ERROR)
    assert "no must-implement list to scaffold" in line and "forward" in line, line
    assert not (tmp_path / "sk" / "ops.txt").exists()
    proc = dltrace("probe", "jax", "--workload", workload, "--device", "standin", "--layers", "op",
                   "-o", str(tmp_path / "t.json"), timeout=600)
    assert proc.returncode == Exit.ERROR and "Traceback" not in proc.stderr, proc.stderr
    assert "list is incomplete, not a must-implement list: jax_callback (user) forward" in proc.stderr
    assert (tmp_path / "t.json").exists()  # kept: it says what was lost
