"""A backend skeleton that proves the must-implement list (``dltrace scaffold torch``).

The list comes from running the cases on torch's stand-in device (tracer.runner, as
``dltrace probe --device standin`` does; read by tracer.analysis.standin_needs), never
from a table: the skeleton registers exactly those ops, each computing on the CPU,
and refuses every other op by name. Its device plumbing is dltrace's own
(tracer/probes/torch_device.py, copied as it is), its kernels are generated from
templates/scaffold/, and its check (tracer/probes/torch_skeleton.py) runs in torch's
environment: the steps match the CPU's, no op outside the list is reached, and each
op on it is needed.

TensorFlow's and JAX's skeletons are written by tracer.scaffold_tensorflow and
tracer.scaffold_jax from their own stand-ins' runs, through the same plan, run and
check; Chainer's and MXNet's interfaces are named (:data:`INTERFACES`).
"""

from __future__ import annotations

import json
import keyword
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from tracer import __version__, envs, tempdirs
from tracer.contract import MODELS, PASSES, USER_API, Exit, UserWorkload
from tracer.errors import DltraceError, ProbeFailed, UsageError
from tracer.files import OutputError, ensure_dir, own_folder, write_bytes, write_text
from tracer.paths import PACKAGE, code_path
from tracer.analysis.standin_needs import PASS_ORDER, StandinNeeds, standin_needs
from tracer.registry import Framework
from tracer.runner import DEFAULT_TIMEOUT, CaseSpec, run_probe
from tracer.trace import Trace

#: The frameworks whose backend interface dltrace does not stand in: what a new device
#: would implement instead.
INTERFACES = {
    "chainer": "a ChainerX backend (C++, built into ChainerX) or a CuPy-like array module",
    "mxnet": "a C++ library of operators and a context (MXLoadLib's external library interface)",
}
#: What the plumbing is copied from, and the check's manifest (tracer.probes.torch_skeleton.MANIFEST).
DEVICE_SOURCE = PACKAGE / "probes" / "torch_device.py"
MANIFEST = "scaffold.json"
#: Device types torch already has (a PrivateUse1 backend cannot take their names) and
#: module names the skeleton's package would shadow.
_TAKEN = frozenset({"cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia",
                    "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone", "standin", "torch",
                    "tracer", "numpy", "check", "device", "kernels"})
#: Names kernels.py defines besides the kernels.
_RESERVED = frozenset({"annotations", "Any", "torch", "device", "NAME", "KERNELS", "MUST_IMPLEMENT", "REFUSED",
                       "register", "unregister", "install"})
_RANDOM = re.compile(r"bernoulli|dropout|rand|normal_|uniform_|multinomial")


#: What an op's name must be to be written into generated code (``aten::addmm.out``).
OP_NAME = re.compile(r"[A-Za-z_]\w*::[A-Za-z_]\w*(?:\.\w+)?", re.ASCII)


def check_framework(framework: str) -> None:
    """torch, TensorFlow and JAX get a skeleton; Chainer and MXNet are named."""
    if framework not in ("torch", "tensorflow", "jax"):
        interface = INTERFACES.get(framework, "an interface dltrace does not know")
        raise UsageError(f"{framework}'s new-device interface is {interface}: dltrace does not stand it in, so "
                         "dltrace scaffold writes torch's, TensorFlow's and JAX's backends only")


def check_name(name: str, framework: str = "torch") -> str:
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise UsageError(f"--name {name!r}: a backend's name is a lower-case Python identifier (e.g. mydevice)")
    if framework == "tensorflow" and not re.fullmatch(r"[a-z][a-z_]*", name):
        raise UsageError(f"--name {name!r}: TensorFlow takes a device type of letters and '_' only (the name "
                         "upper-cased), no digits")
    if name in _TAKEN or name in sys.stdlib_module_names:
        raise UsageError(f"--name {name!r} is taken (a torch device type, or a module the skeleton or its check "
                         "imports: the package would shadow it)")
    return name


def plan(fw: Framework, workloads: list[str], api: str | None,
         users: list[UserWorkload] | None = None) -> list[CaseSpec]:
    """The cases to stand in: each workload at ``api``, or at every level it is written
    at (a model's own levels; a primitive's are the framework's), then the user's own
    workloads (their level is their own)."""
    specs = [CaseSpec(u.name, USER_API, layers=("python", "op"), user=u) for u in users or []]
    for w in workloads:
        levels = MODELS[w].apis if w in MODELS else tuple(fw.apis)
        if api is not None and api not in levels:
            raise UsageError(f"{w} is written at the {' and '.join(levels)} level only, not {api}")
        specs += [CaseSpec(w, a, layers=("python", "op")) for a in ((api,) if api else levels)]
    return specs


def stand_in(fw: Framework, specs: list[CaseSpec], timeout: float = DEFAULT_TIMEOUT,
             command: str = "") -> list[Trace]:
    """The cases run on the stand-in device, in one probe process; their traces."""
    with tempdirs.owned("dltrace-scaffold-") as tmp:
        results = run_probe(fw, specs, tmp, device="standin", timeout=timeout, command=command)
        failed = [r for r in results if r.error]
        if failed:
            r = failed[0]
            raise ProbeFailed(f"{fw.name} {r.spec.primitive} ({r.spec.api}) on the stand-in device: {r.error}")
        return [r.load() for r in results]


def needs_of(traces: list[Trace]) -> StandinNeeds:
    needs = standin_needs(traces, [], None)
    if needs is None or not needs.must_implement:
        raise DltraceError("the stand-in run recorded no op reaching the backend (no standin meta in its traces)")
    if needs.lost:  # a skeleton of part of the list would pass for the whole
        what, why = next(iter(needs.lost.items()))
        raise DltraceError(f"no must-implement list to scaffold: {what} did not run whole on the stand-in device: "
                           f"{why}")
    return needs


@dataclass(frozen=True)
class Kernel:
    op: str  # aten::addmm.out
    passes: tuple[str, ...]
    function: str

    @property
    def namespace(self) -> str:
        return self.op.split("::", 1)[0]

    @property
    def packet(self) -> str:
        return self.op.split("::", 1)[1].split(".", 1)[0]

    @property
    def overload(self) -> str:
        name = self.op.split("::", 1)[1]
        return name.split(".", 1)[1] if "." in name else "default"

    @property
    def target(self) -> str:
        """The Python expression of the op's overload packet (``torch.ops.aten.addmm.out``),
        reached by getattr where a part is no identifier or is a keyword (``random_.from``)."""
        expr = "torch.ops"
        for part in (self.namespace, self.packet, self.overload):
            plain = part.isidentifier() and part.isascii() and not keyword.iskeyword(part)
            expr = f"{expr}.{part}" if plain else f"getattr({expr}, {part!r})"
        return expr


def kernels(needs: StandinNeeds) -> list[Kernel]:
    """One kernel per op on the list, in the order the passes first reached them, each
    a function name of its own (``aten::fill_.Scalar`` -> ``fill__Scalar``)."""
    out: list[Kernel] = []
    taken = set(_RESERVED)
    for op in needs.must_implement:
        if not OP_NAME.fullmatch(op):  # it is written into Python as a string and an attribute path
            raise DltraceError(f"op name {op[:80]!r} cannot be written into a skeleton (namespace::name[.overload], "
                               "ASCII letters, digits and '_'): refused")
        name = re.sub(r"\W", "_", op.split("::", 1)[1] if op.startswith("aten::") else op)
        while name in taken or keyword.iskeyword(name):
            name += "_"
        taken.add(name)
        out.append(Kernel(op, tuple(needs.passes_of(op)), name))
    return out


def describe_cases(specs: list[CaseSpec]) -> str:
    """What the skeleton runs, in words: "lenet's training step (functional, layer)"."""
    by: dict[str, list[str]] = {}
    for s in specs:
        by.setdefault(s.primitive, []).append(s.api)
    users = {s.primitive for s in specs if s.user is not None}
    parts = [f"{w}'s training step" if w in MODELS or w in users else w for w in by]
    levels = sorted({a for apis in by.values() for a in apis}, key=["functional", "layer", USER_API].index)
    what = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
    if not any(w in MODELS or w in users for w in by):
        what = f"the primitives {what}, forward and backward"
    said = [{USER_API: "your workload's own"}.get(a, a) for a in levels]
    return f"{what} ({', '.join(said)} level{'s' if len(levels) > 1 else ''})"


def code_text(text: str) -> str:
    """``text`` (a command line, a path: what a user supplies) made safe to stand in a
    generated file's comment or docstring: backslashes, quotes, newlines, control and
    non-ASCII characters escaped (``\\n``, ``\\"``, ``\\u202e``), so that it can end no
    comment, string or docstring and becomes no code."""
    return text.encode("unicode_escape").decode("ascii").replace('"', '\\"').replace("'", "\\'")


def template_env() -> jinja2.Environment:
    # Python and Markdown, not HTML: nothing to escape
    return jinja2.Environment(loader=jinja2.PackageLoader("tracer", "templates/scaffold"), autoescape=False,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True)


def case_rows(specs: list[CaseSpec], traces: list[Trace]) -> list[dict[str, str]]:
    """Per case, how many ops each pass reached (a README's table)."""
    rows = []
    for spec, trace in zip(specs, traces):
        one = needs_of([trace])
        rows.append({"label": f"{spec.primitive} ({spec.api})",
                     **{p: str(len(one.by_pass.get(p, []))) + " ops" for p in PASS_ORDER}})
    return rows


def write_list(folder: Path, framework: str, version: str, what: str, must: str, ks: list[Kernel]) -> None:
    """ops.txt: the must-implement list, each op with the passes that reached it."""
    width = max(len(k.op) for k in ks)
    write_text(folder / "ops.txt", "".join(
        [f"# what {must} for {what}: op, then the passes that reached it\n",
         f"# (dltrace {__version__}, {framework} {version}, a run on the stand-in device)\n",
         *(f"{k.op:<{width}}  {','.join(k.passes)}\n" for k in ks)]))


def write_manifest(folder: Path, framework: str, version: str, name: str, what: str, specs: list[CaseSpec],
                   ks: list[Kernel], evidence: str, command: str, **more: str) -> None:
    """scaffold.json: what was run (the cases the check runs again), the list, by whom."""
    kept = workload_refs(folder, specs)
    manifest = {"framework": framework, "package": name, **more, "what": what,
                "cases": [{"workload": s.primitive, "api": s.api, "shape": list(s.resolved_shape()),
                           **({"user": kept[s.user]} if s.user is not None else {})} for s in specs],
                "ops": {k.op: list(k.passes) for k in ks},
                "made_by": {"dltrace": __version__, "command": command, framework: version,
                            "evidence": evidence, "passes": list(PASSES)}}
    write_text(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")


def workload_refs(folder: Path, specs: list[CaseSpec]) -> dict[UserWorkload, dict[str, str]]:
    """Each user's workload as scaffold.json names it: its file relative to the skeleton
    (``../models/net.py``), so that the manifest names no folder of this machine, and the
    check still runs the file where it is, beside the modules it imports."""
    return {w: {**w.to_json(), "file": os.path.relpath(w.file, folder.resolve())}
            for w in dict.fromkeys(s.user for s in specs if s.user is not None)}


def prepare(folder: Path, force: bool) -> Path:
    """``folder``, created and writable; one that holds other files is refused unless
    ``force`` (a team's edited kernels are not written over by accident), and even then
    unless it is a skeleton dltrace wrote (its scaffold.json: never ``-o / --force``). A
    folder that is a link is refused: a skeleton is written where it is named."""
    if folder.is_symlink():
        raise OutputError(f"cannot write {folder}: it is a link (name the folder itself)")
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"cannot write {folder}: it is a file")
    if folder.is_dir() and any(folder.iterdir()):
        if not force:
            raise OutputError(f"{folder} is not empty (--force writes the skeleton over what is there)")
        manifest = folder / MANIFEST
        if manifest.is_symlink() or not manifest.is_file():
            raise OutputError(f"{folder} holds no skeleton dltrace wrote (no {MANIFEST}): --force writes only over "
                              "one")
    return ensure_dir(folder)


def write(folder: Path, name: str, specs: list[CaseSpec], traces: list[Trace], command: str) -> list[Kernel]:
    """Write the skeleton into ``folder`` (made by :func:`prepare`); its kernels."""
    needs = needs_of(traces)
    ks = kernels(needs)
    torch_version = str(traces[0].info.framework_version or "?")
    what = describe_cases(specs)
    ctx: dict[str, Any] = {"name": name, "what": what, "kernels": ks, "ops": ks, "tool_version": __version__,
                           "command": code_text(command), "torch_version": code_text(torch_version),
                           "folder": code_text(folder.name or str(folder)),
                           "steps": 2, "models": any(s.primitive in MODELS or s.user is not None for s in specs),
                           "random": any(_RANDOM.search(k.op) for k in ks), "cases": case_rows(specs, traces)}
    env = template_env()
    pkg = own_folder(folder / name)
    # each file written to a new name and renamed over what is there: a link there is replaced, never followed
    write_text(pkg / "kernels.py", env.get_template("kernels.py.j2").render(ctx))
    write_text(pkg / "__init__.py", env.get_template("__init__.py.j2").render(ctx))
    write_bytes(pkg / "device.py", DEVICE_SOURCE.read_bytes())
    write_text(folder / "check.py", env.get_template("check.py.j2").render(ctx))
    write_text(folder / "README.md", env.get_template("README.md.j2").render(ctx))
    write_list(folder, "torch", torch_version, what, "a torch backend must implement", ks)
    write_manifest(folder, "torch", torch_version, name, what, specs, ks, needs.evidence, command)
    return ks


@dataclass
class Checked:
    ok: bool
    lines: list[str]
    reason: str
    seconds: float


#: Bytes of the check's output kept for its lines and its reason: it is streamed to
#: files, and only their tails are read back (a check that printed 640 MiB took
#: dltrace to 1.97 GB when its output was kept whole, twice).
OUTPUT_TAIL = 64 * 1024


def check(fw: Framework, folder: Path, timeout: float = DEFAULT_TIMEOUT) -> Checked:
    """Run the skeleton's check.py in ``fw``'s environment with the tracer package on
    its path (as a probe runs); its verdict, or the one line why it failed. Its output
    goes to files in its temporary folder, of which the last OUTPUT_TAIL bytes are read."""
    if not (folder / MANIFEST).is_file() or not (folder / "check.py").is_file():
        raise DltraceError(f"{folder} holds no skeleton (no {MANIFEST} or check.py): write one with --model "
                           "or --primitives")
    python = envs.python_for(fw)
    with tempdirs.owned("dltrace-check-") as tmp:
        env = {**os.environ, **fw.env}
        env["PYTHONPATH"] = os.pathsep.join([str(code_path(tmp)), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        t0 = time.perf_counter()
        with open(tmp / "check.out", "wb") as stdout, open(tmp / "check.err", "wb") as stderr:
            try:
                proc = subprocess.run([str(python), str(folder.resolve() / "check.py")], stdout=stdout,
                                      stderr=stderr, env=env, cwd=tmp, timeout=timeout, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                return Checked(False, [], f"the check did not end in {timeout:g} s", timeout)
        seconds = time.perf_counter() - t0
        lines = [line for line in tail(tmp / "check.out").splitlines() if line.strip()]
        said = [line.strip() for line in tail(tmp / "check.err").splitlines() if line.strip()]
    if proc.returncode == Exit.OK:
        return Checked(True, lines, "", seconds)
    reason = said[-1] if said else f"exit status {proc.returncode}"
    return Checked(False, lines, reason.removeprefix("check failed: ")[:OUTPUT_TAIL // 16], seconds)


def tail(path: Path, limit: int = OUTPUT_TAIL) -> str:
    """The last ``limit`` bytes of ``path`` as text, from a line's start, a first line
    saying how much was left out before them: never the whole file in memory."""
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size <= limit:
            fh.seek(0)
            return fh.read().decode(errors="replace")
        fh.seek(size - limit)
        kept = fh.read().decode(errors="replace").partition("\n")[2]
    return f"[... {size - len(kept.encode(errors='replace')):,} bytes of the check's output left out]\n{kept}"
