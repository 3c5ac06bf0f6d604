"""The check of a TensorFlow backend skeleton (``dltrace scaffold tensorflow``): does a
PluggableDevice that registers exactly the must-implement op kernels train the
network (or run the primitives) as the CPU does, and is each of those ops needed?

Run inside TensorFlow's environment by the skeleton's own check.py (``dltrace scaffold
tensorflow --check`` starts it there). It builds the skeleton's library with g++
(its device.cc, variables.cc and kernels.cc, against the wheel's headers), loads it as
the stand-in device's library (tracer.probes.tensorflow_standin.use), and runs
dltrace's own probes' steps (the models' training steps, the primitives' forward and
backward, a user's workload), as written (eager ops with soft placement off), on the
CPU and on the skeleton's device from the same seeds. A registered kernel cannot be
unregistered in a process, so each op's need is shown by a process of its own whose
build leaves that op out (``--without OP``: the skeleton's TF_InitKernel reads
DLTRACE_SKELETON_WITHOUT).

A step that is a ``tf.function`` runs as a graph, as ``model.fit`` runs one: there an
op with no kernel on the device is no error but a silent fall back to the host, so each
graph's placement is read (tracer.probes.tensorflow_placement, through the stand-in's
recorder) and an op of the list placed on the host fails the step, naming it.

Exit status (tracer.contract.Exit): OK when every case matches the CPU in two steps,
no op outside the list was reached, none of it fell back to the host, and each
registered op is needed; ERROR otherwise, with the reason on one line of stderr.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from tracer.probes.cases import make_user_case
from tracer.contract import MODELS, Exit, UserWorkload, workload_passes
from tracer.probes import base, tensorflow_standin
from tracer.probes import tensorflow as tf_probe
from tracer.probes.skeleton_check import STEPS, CheckFailed, Spec, first_line, read_manifest, verdict

RTOL, ATOL = 1.3e-6, 1e-5  # float32, as torch.testing.assert_close (the torch skeleton's check)


def build(folder: Path, package: str, device_type: str) -> Path:
    """The skeleton's library, built from its sources into ``folder/build``."""
    compiler = shutil.which("g++")
    if compiler is None:
        raise CheckFailed("no g++ to build the skeleton with (the set-up installs it: make setup)")
    out = folder / "build" / f"lib{package}.so"
    out.parent.mkdir(exist_ok=True)
    sources = [folder / package / name for name in ("device.cc", "variables.cc", "kernels.cc")]
    cmd = tensorflow_standin.compile_command(compiler, sources, out, "-DDLTRACE_SKELETON",
                                             f'-DDLTRACE_DEVICE_TYPE="{device_type}"')
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        said = [line for line in proc.stderr.splitlines() if "error" in line] or proc.stderr.splitlines() or ["?"]
        raise CheckFailed(f"the skeleton does not build: {said[0][:300]}")
    return out


def _seeded() -> None:
    tf.keras.utils.set_random_seed(0)


def _case(spec: Spec, device: str) -> base.Case:
    _seeded()
    if spec.user is not None:
        w = UserWorkload.from_json(spec.user)
        assert w is not None
        return make_user_case(tf_probe, w, device)  # type: ignore[no-any-return]
    if spec.workload in MODELS:
        return tf_probe.make_model_case(spec.workload, spec.api, device, spec.shape)
    return tf_probe.make_case(spec.workload, spec.api, device, spec.shape)


def _host(value: Any) -> list[np.ndarray]:
    """What a pass returned, as host arrays: tensors in it, in order (a tape is skipped;
    an embedding's sparse gradient made dense, so that each gradient stays beside its
    parameter)."""
    if isinstance(value, tf.IndexedSlices):
        return [np.array(tf.convert_to_tensor(value))]
    if isinstance(value, (tf.Tensor, tf.Variable)):
        return [np.array(value)]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _host(v)]
    return []


def _adaptive_lr(spec: Spec) -> float | None:
    """The learning rate of an optimizer that divides by the gradient's size (the
    transformer's Adam), else None."""
    return base.TRANSFORMER["lr"] if spec.workload == "transformer" and spec.user is None else None


def _params(case: base.Case) -> list[Any]:
    return list(case.private.get("parameters") or [])


class FellToHost(Exception):
    """An op the skeleton must run on its device that a graph placed on the host."""


def _steps(spec: Spec, device: str, must: set[str] | None = None) -> list[dict[str, list[np.ndarray]]]:
    """``STEPS`` steps of the case on ``device``: each step's output (loss), gradients and
    parameters after it. With ``must`` (the skeleton's list, on its device): an op of it
    that a graph (a tf.function) placed on the host fails the step, naming it, since in a
    graph a missing kernel is no error, only a silent fall back to the host."""
    case = _case(spec, device)  # on the device, what the CPU's run placed is forgotten first
    single = bool(case.private.get("single_step"))
    passes = ("forward",) if single else \
        tuple(workload_passes(spec.workload)) if spec.user is None else ("forward", "backward")
    out = []
    for _ in range(STEPS):
        state = case.forward()
        _on_device(must)
        grads = case.backward(state) if "backward" in passes else None
        _on_device(must)
        out.append({"output": _host(state), "gradients": _host(grads),
                    "parameters": [np.array(p) for p in _params(case)]})
    return out


def _on_device(must: set[str] | None) -> None:
    """Raise FellToHost for the first op of ``must`` a graph of the case placed on the host
    (the stand-in's recorder keeps each pass's placements: tensorflow_standin.Recorder)."""
    if must is None:
        return
    fell = list(dict.fromkeys(op for ops in tensorflow_standin.RECORDER.host.values() for op in ops if op in must))
    if fell:
        raise FellToHost(f"{', '.join(fell)} ran on the host: a graph placed {'them' if len(fell) > 1 else 'it'} "
                         f"there, for want of a kernel on {tensorflow_standin.device()}")


def _first_line(exc: BaseException) -> str:
    """One line of a step's failure; TensorFlow's placement error said as what it means
    here (the device has no kernel of that op)."""
    if isinstance(exc, FellToHost):
        return str(exc)
    chain: list[str] = []
    seen: BaseException | None = exc  # a layer that re-raises hides the placement error in its context (keras)
    while seen is not None and len(chain) < 8:
        chain.append(" ".join(str(seen).split()))
        seen = seen.__cause__ or seen.__context__
    said = " ".join(chain)
    unplaced = re.search(r"Could not satisfy device specification '([^']+)'.*\[Op:(\w+)\]", said)
    if unplaced:
        return f"{unplaced.group(2)} has no kernel on {unplaced.group(1).rsplit('/', 1)[-1]} (TensorFlow could not " \
               "place it there)"
    rewritten = re.search(r"No registered '(\w+)' OpKernel for '(\w+)' devices", said)
    if rewritten:  # a graph rewrite (grappler's AddN) put it on the device after the placement
        return f"{rewritten.group(1)} has no kernel on device:{rewritten.group(2)}:0 (a graph's node TensorFlow " \
               "made after placing it there)"
    return first_line(exc)


def _differs(got: list[np.ndarray], want: list[np.ndarray]) -> str:
    if len(got) != len(want):
        return f"{len(got)} values against the CPU's {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"#{i}: {g.dtype}{list(g.shape)} against {w.dtype}{list(w.shape)}"
        if g.dtype.kind in "fc" and not np.allclose(g, w, rtol=RTOL, atol=ATOL, equal_nan=True):
            return f"#{i}: max abs difference {float(np.max(np.abs(g.astype(np.float64) - w))):.3g}"
        if g.dtype.kind not in "fc" and not np.array_equal(g, w):
            return f"#{i} differs"
    return ""


#: A gradient entry no larger than this is rounding-sized: Adam divides it by its own
#: size, so the update magnifies rounding up to the learning rate. Under Adam those
#: parameter entries are compared within lr (as torch's skeleton check does).
ROUNDING = 1e-5


def _update_differs(got: list[np.ndarray], want: list[np.ndarray], grads: list[np.ndarray],
                    lr: float | None) -> str:
    if lr is None or len(grads) != len(want):
        return _differs(got, want)
    for i, (g, w, d) in enumerate(zip(got, want, grads)):
        small = np.abs(d) <= ROUNDING if d.shape == w.shape else np.zeros(w.shape, bool)
        wrong = _differs([g[~small]], [w[~small]]) or \
            ("" if np.allclose(g[small], w[small], rtol=0, atol=lr) else "beyond Adam's lr")
        if wrong:
            return f"#{i}: {wrong.split(': ', 1)[-1]}"
    return ""


def check_case(spec: Spec, device: str, must: set[str]) -> str:
    try:
        want = _steps(spec, "/CPU:0")
    except Exception as exc:  # noqa: BLE001 - a workload that does not run on the CPU proves nothing
        raise CheckFailed(f"{spec.label}: the step fails on the CPU too: {_first_line(exc)}") from None
    try:
        got = _steps(spec, tf_probe.STANDIN, must)
    except Exception as exc:  # noqa: BLE001 - any failure of the step is the check's answer
        raise CheckFailed(f"{spec.label}: {_first_line(exc)}") from None
    lr = _adaptive_lr(spec)
    for n, (g, w) in enumerate(zip(got, want), 1):
        for what in ("output", "gradients", "parameters"):
            wrong = _update_differs(g[what], w[what], w["gradients"], lr) if what == "parameters" else \
                _differs(g[what], w[what])
            if wrong:
                raise CheckFailed(f"{spec.label}: the {what} of step {n} differ from the CPU's ({wrong})")
    model = spec.workload in MODELS or spec.user is not None
    placed = list(dict.fromkeys(op for ops in tensorflow_standin.RECORDER.host.values() for op in ops))
    host = f"; placed on the host by its graphs, as on the stand-in: {', '.join(placed)}" if placed else ""
    return (f"{spec.label}: {STEPS} steps match the CPU: the {'loss' if model else 'output'}, "
            f"{len(want[0]['gradients'])} gradients" + (" and the parameters after the update" if model else "")
            + host)


def _without(folder: Path, op: str) -> str:
    """The first line a process whose build leaves ``op`` out fails with, or "" when
    every step runs without it."""
    env = {**os.environ, "DLTRACE_SKELETON_WITHOUT": op}
    proc = subprocess.run([sys.executable, str(folder / "check.py"), "--without", op], capture_output=True,
                          text=True, env=env, timeout=900, stdin=subprocess.DEVNULL)
    if proc.returncode == Exit.OK:
        return ""
    said = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    return said[-1] if said else f"exit status {proc.returncode}"


def check_minimal(folder: Path, ops: list[str]) -> str:
    for op in ops:
        failure = _without(folder, op)
        if not failure:
            raise CheckFailed(f"{op} is not needed: every step runs without its kernel")
        if not re.search(rf"\b{re.escape(op)}\b", failure):
            raise CheckFailed(f"without {op} the step fails on something else: {failure}")
    return f"{len(ops)} ops, each needed (a build without its registration fails a step naming it)"


def _load(folder: Path, built: bool) -> tuple[dict[str, Any], list[Spec], str]:
    """The skeleton's manifest, cases, and its device, loaded (built first unless ``built``)."""
    manifest, specs = read_manifest(folder)
    package, device_type = manifest["package"], manifest["device_type"]
    library = folder / "build" / f"lib{package}.so" if built else build(folder, package, device_type)
    tensorflow_standin.use(library, device_type)
    return manifest, specs, tensorflow_standin.install()


def main(folder: Path, argv: list[str] | None = None) -> int:
    """Check the skeleton in ``folder`` (``--without OP``: only run its steps on a build
    that leaves OP out); print the summary, or the reason on stderr."""
    if (argv or [])[:1] == ["--without"]:
        try:
            manifest, specs, _ = _load(folder, built=True)
            for spec in specs:
                try:
                    _steps(spec, tf_probe.STANDIN, set(manifest["ops"]))
                except Exception as exc:  # noqa: BLE001 - the failure is the answer
                    print(f"{spec.label}: {_first_line(exc)}", file=sys.stderr)
                    return Exit.ERROR
        except Exception as exc:  # noqa: BLE001 - a build that does not load
            print(f"check failed: the skeleton does not load: {_first_line(exc)}", file=sys.stderr)
            return Exit.ERROR
        return Exit.OK

    def check() -> list[str]:
        manifest, specs, device = _load(folder, built=False)
        ops = list(manifest["ops"])
        return [f"{device}: {len(ops)} op kernels registered ({manifest['package']}/kernels.cc), every other op fails",
                *(check_case(s, device, set(ops)) for s in specs), check_minimal(folder, ops)]

    return verdict(check, _first_line)
