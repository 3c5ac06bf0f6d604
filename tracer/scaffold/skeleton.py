"""What every framework's skeleton is made of, and the one writer that makes it.

A skeleton is the stand-in run's must-implement list (tracer.analysis.standin_needs)
written out as a package the team edits: its kernels from templates/scaffold/, the
stand-in's own device or consumer copied as it is, a check.py and a README, ops.txt and
scaffold.json. Only the parts differ between frameworks (a :class:`Writer` names them:
tracer.scaffold.WRITERS holds one per framework); the shape of writing them is
:meth:`Writer.write`, once.
"""

from __future__ import annotations

import json
import keyword
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from tracer import __version__
from tracer.analysis.standin_needs import PASS_ORDER, StandinNeeds, standin_needs
from tracer.contract import MODELS, PASSES, USER_API, UserWorkload
from tracer.errors import DltraceError
from tracer.files import OutputError, ensure_dir, own_folder, write_bytes, write_text
from tracer.runner import CaseSpec
from tracer.trace import Trace

#: The skeleton's manifest, read by its check (tracer.probes.skeleton_check).
MANIFEST = "scaffold.json"


@dataclass(frozen=True)
class Kernel:
    op: str  # aten::addmm.out, stablehlo.add, Conv2D
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


def _no_context(name: str, traces: list[Trace], ks: list[Kernel]) -> dict[str, Any]:
    return {}


def _no_manifest(name: str) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class Writer:
    """One framework's skeleton: what it is made of. Every field is a part the shared
    :meth:`write` fills in; a framework that needs more than these fields say is a new
    field here, not a copy of :meth:`write`."""

    framework: str
    #: The framework as the docs name it (``TensorFlow``).
    title: str
    #: The list's ops as kernels, each a function name of its own; refuses an op that
    #: cannot be written into code.
    kernels: Callable[[StandinNeeds], list[Kernel]]
    #: The templates' name for the framework's version (``torch_version``).
    version_key: str
    #: Files of the package (``NAME/``): (file, template) rendered, (file, source) copied.
    rendered: tuple[tuple[str, str], ...]
    copied: tuple[tuple[str, Path], ...]
    #: The folder's check.py and README.md templates.
    check_template: str
    readme_template: str
    #: ops.txt's first line: "what {must} for ..." ("a torch backend must implement").
    must: str
    #: What the command line says was written: ``{name}`` and ``{n}`` filled in.
    summary: str
    #: The framework's own template values (name, traces, kernels), and scaffold.json's (name).
    context: Callable[[str, list[Trace], list[Kernel]], dict[str, Any]] = _no_context
    manifest: Callable[[str], dict[str, str]] = _no_manifest
    #: A stricter rule for the backend's name than a Python identifier's, and why.
    name_rule: tuple[str, str] | None = field(default=None)
    #: The list the kernels are made from, read off the run's traces (the stand-in's;
    #: the compiled door's graphs: tracer.scaffold.torch_compiled).
    needs: Callable[[list[Trace]], StandinNeeds] = field(default=lambda traces: _stand_in_needs(traces))
    #: How the cases are run for the list: "eager" (the stand-in device) or "compiled".
    door: str = "eager"
    #: Where the list came from, as ops.txt says.
    source: str = "a run on the stand-in device"

    def write(self, folder: Path, name: str, specs: list[CaseSpec], traces: list[Trace],
              command: str) -> list[Kernel]:
        """Write the skeleton into ``folder`` (made by :func:`prepare`); its kernels."""
        needs = self.needs(traces)
        ks = self.kernels(needs)
        version = str(traces[0].info.framework_version or "?")
        what = describe_cases(specs)
        ctx: dict[str, Any] = {"name": name, "what": what, "kernels": ks, "ops": ks, "tool_version": __version__,
                               "command": code_text(command), self.version_key: code_text(version),
                               "folder": code_text(folder.name or str(folder)), "steps": 2,
                               "models": any(s.primitive in MODELS or s.user is not None for s in specs),
                               "cases": case_rows(specs, traces) if self.door == "eager"
                               else case_rows(specs, traces, self.needs),
                               **self.context(name, traces, ks)}
        env = template_env()
        pkg = own_folder(folder / name)
        # each file written to a new name and renamed over what is there: a link there is replaced, never followed
        for file, template in self.rendered:
            write_text(pkg / file, env.get_template(template).render(ctx))
        for file, source in self.copied:
            write_bytes(pkg / file, source.read_bytes())
        write_text(folder / "check.py", env.get_template(self.check_template).render(ctx))
        write_text(folder / "README.md", env.get_template(self.readme_template).render(ctx))
        write_list(folder, self.framework, version, what, self.must, ks, self.source)
        write_manifest(folder, self.framework, version, name, what, specs, ks, needs.evidence, command,
                       **self.manifest(name))
        return ks


def _stand_in_needs(traces: list[Trace]) -> StandinNeeds:
    return needs_of(traces)  # looked up when called: the eager door's list


def needs_of(traces: list[Trace]) -> StandinNeeds:
    """The stand-in run's must-implement list; refused when it is empty or a pass was lost."""
    needs = standin_needs(traces, [], None)
    if needs is None or not needs.must_implement:
        raise DltraceError("the stand-in run recorded no op reaching the backend (no standin meta in its traces)")
    if needs.lost:  # a skeleton of part of the list would pass for the whole
        what, why = next(iter(needs.lost.items()))
        raise DltraceError(f"no must-implement list to scaffold: {what} did not run whole on the stand-in device: "
                           f"{why}")
    return needs


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
    # Python, C++ and Markdown, not HTML: nothing to escape
    return jinja2.Environment(loader=jinja2.PackageLoader("tracer", "templates/scaffold"), autoescape=False,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True)


def case_rows(specs: list[CaseSpec], traces: list[Trace],
              needs: Callable[[list[Trace]], StandinNeeds] | None = None) -> list[dict[str, str]]:
    """Per case, how many ops each pass reached (a README's table)."""
    rows = []
    for spec, trace in zip(specs, traces):
        one = (needs or needs_of)([trace])
        rows.append({"label": f"{spec.primitive} ({spec.api})",
                     **{p: str(len(one.by_pass.get(p, []))) + " ops" for p in PASS_ORDER}})
    return rows


def write_list(folder: Path, framework: str, version: str, what: str, must: str, ks: list[Kernel],
               source: str = "a run on the stand-in device") -> None:
    """ops.txt: the must-implement list, each op with the passes that reached it."""
    width = max(len(k.op) for k in ks)
    write_text(folder / "ops.txt", "".join(
        [f"# what {must} for {what}: op, then the passes that reached it\n",
         f"# (dltrace {__version__}, {framework} {version}, {source})\n",
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
