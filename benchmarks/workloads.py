"""What recording each layer costs on a real model: every example in examples/ (a
real network from its framework's own model zoo, docs/workloads.md), probed on this
machine's CPU with all four layers by the real command, and each pass's figures read
from its trace as the audit words them (tracer.analysis.workload_coverage.Cost.said:
the median of ABBA-paired steps with its quartiles): the untraced step, the Python
tracer's and the framework's profiler's traced step over it, and py-spy's sampled loop
over the unsampled one; the probe's wall time; the must-implement count each
framework's audit gives it (in the framework's unit) and, for torch, the stand-in run's
list and the skeleton's check. torch also probes benchmarks/bert_tiny.py, a
dispatch-bound step.

Then the peers, side by side in one process (benchmarks/peers_worker.py, in torch's
environment; viztracer is pip-installed there, pinned, on first use, for this benchmark
only): on ResNet-18 and the BERT-tiny-like step, each pass untraced, under dltrace's
Python tracer and op layer, viztracer, cProfile, and torch.profiler bare and with
stacks and shapes, in rounds whose order rotates; each factor the median of the rounds'
ratios to the same round's untraced step, with their quartiles. The goals (issue 58):
the op layer's step at most 1.25 times torch.profiler's, the Python layer at most 1.25
times viztracer's (each the median of the rounds' ratios of the two).
A benchmark, not a test: run it and read the tables.

    .venv/bin/python benchmarks/workloads.py [--only torch,jax] [--skeleton] [--no-peers] [--no-probes]
    .venv/bin/python benchmarks/workloads.py --show      # the tables of workloads.json again, and as Markdown

Writes benchmarks/workloads.json (a run of a part keeps the other parts' figures).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "benchmarks"
sys.path.insert(0, str(ROOT))

from tracer import envs, registry  # noqa: E402
from tracer.analysis.workload_coverage import Cost, layer_costs  # noqa: E402
from tracer.collect.costs import quartiles  # noqa: E402
from tracer.contract import THREAD_ENV  # noqa: E402
from tracer.trace import load  # noqa: E402

DLTRACE = str(Path(sys.executable).parent / "dltrace")
OUT = HERE / "workloads.json"
#: The peers' examples: torch's registry example and the dispatch-bound step.
PEER_EXAMPLES = {"resnet18": ROOT / "examples" / "torch" / "resnet18.py", "bert_tiny": HERE / "bert_tiny.py"}
#: The extra workloads torch's probe rows cover beside its registry examples.
EXTRA = {"torch": {"bert_tiny": HERE / "bert_tiny.py"}}
#: viztracer, for this benchmark only (nothing in dltrace imports it): pinned, so that two
#: runs compare the same peer.
VIZTRACER = "viztracer==1.1.1"
#: The peers' columns: (mode in peers_worker, heading).
PEER_COLUMNS = (("dltrace-python", "dltrace Python layer"), ("dltrace-op", "dltrace op layer (step)"),
                ("torch.profiler", "torch.profiler (step)"), ("torch.profiler+stacks", "+ stacks, shapes (step)"),
                ("viztracer", "viztracer"), ("cprofile", "cProfile"),
                ("dltrace-op-record", "dltrace op record (whole)"), ("torch.profiler-record", "torch.profiler (whole)"))
#: The goals: (what, mode, the peer's mode, at most this times the peer's factor).
GOALS = (("op layer", "dltrace-op", "torch.profiler", 1.25), ("Python layer", "dltrace-python", "viztracer", 1.25))


def _run(*args: str, timeout: float = 1800) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.perf_counter()
    proc = subprocess.run([DLTRACE, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return proc, time.perf_counter() - t0


def _short(cost: dict[str, Any] | float | None) -> str:
    """A layer's cost as the audit words it (Cost.said), without its quartiles (a row
    of before the pairs holds the bare factor)."""
    said = Cost(cost).said if not isinstance(cost, dict) else cost["said"]
    return "—" if said == "not measured" else said.split(" (")[0]


def _spread(values: list[float]) -> dict[str, float]:
    low, high = quartiles(values)
    return {"factor": statistics.median(values), "low": low, "high": high}


# ----------------------------------------------------------------------------- the probes


def probes(only: list[str], skeleton: bool) -> list[dict[str, Any]]:
    """Each example probed by the real command, its costs read as the audit reads them."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, fw in registry.load().items():
            if only and name not in only:
                continue
            examples = {ex_name: ex.path for ex_name, ex in fw.examples.items()}
            for ex_name, path in {**examples, **EXTRA.get(name, {})}.items():
                out = Path(tmp) / f"{name}-{ex_name}.json"
                print(f"  probing {name} {ex_name} ...", flush=True)
                proc, wall = _run("probe", name, "--workload", str(path), "-o", str(out))
                if proc.returncode != 0:
                    rows.append({"framework": name, "example": ex_name, "error": proc.stderr.strip()[-300:]})
                    continue
                costs = layer_costs(load(out))
                row = {"framework": name, "example": ex_name, "probe_s": round(wall, 1),
                       "passes": [{"pass": c.pass_, "untraced_s": c.untraced_s,
                                   **{layer: {**dataclasses.asdict(getattr(c, layer)), "said": getattr(c, layer).said}
                                      for layer in ("python", "op", "native")}} for c in costs]}
                if ex_name in examples:  # the audit's list (the extra workloads' costs only)
                    audit, audit_s = _run("audit", name, "--workload", str(path), "--traces", tmp)
                    found = re.search(r"what a \S+ backend must implement \((\d+) ([^;]+);", audit.stdout)
                    row.update(audit_s=round(audit_s, 1), must_implement=int(found.group(1)) if found else None,
                               unit=found.group(2) if found else audit.stderr.strip()[-200:])
                rows.append(row)
        if skeleton and (not only or "torch" in only):
            ex = registry.load()["torch"].examples["resnet18"]
            proc, wall = _run("scaffold", "torch", "--workload", str(ex.path), "-o", str(Path(tmp) / "sk"), "--check")
            said = re.search(r"checked in ([\d.]+) s", proc.stdout)
            ops = re.search(r"registers (\d+) ops", proc.stdout)
            rows.append({"framework": "torch", "example": "resnet18", "skeleton": proc.returncode == 0,
                         "ops": int(ops.group(1)) if ops else None, "scaffold_s": round(wall, 1),
                         "check_s": float(said.group(1)) if said else None})
    return rows


# ----------------------------------------------------------------------------- the peers


def ensure_viztracer(python: Path) -> str:
    """VIZTRACER in torch's environment, installed on first use. '' or why it is missing."""
    probe = subprocess.run([str(python), "-c", "import viztracer; print(viztracer.__version__)"],
                           capture_output=True, text=True)
    if probe.returncode == 0 and probe.stdout.strip() == VIZTRACER.split("==")[1]:
        return ""
    print(f"  installing {VIZTRACER} into {python.parent.parent} (for this benchmark only) ...", flush=True)
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", VIZTRACER],
                          capture_output=True, text=True)
    return "" if proc.returncode == 0 else f"pip install {VIZTRACER} failed: {proc.stderr.strip().splitlines()[-1:]}"


def peers(least: int, most: int, budget_s: float, threads: int) -> dict[str, Any]:
    """Each peer example's passes under every recorder, in one process of torch's
    environment, with ``threads`` intra-op threads (0: torch's default)."""
    fw = registry.load()["torch"]
    python = envs.python_for(fw)
    problem = ensure_viztracer(python)
    if problem:
        return {"error": problem}
    req = {"probe": fw.probe, "source_roots": list(fw.source_roots),
           "workloads": {name: str(path) for name, path in PEER_EXAMPLES.items()},
           "least": least, "most": most, "budget_s": budget_s}
    env = {**os.environ, **fw.env, "PYTHONHASHSEED": "0"}
    if threads:
        env.update({k: str(threads) for k in THREAD_ENV})
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="dltrace-peers-") as tmp:
        (Path(tmp) / "req.json").write_text(json.dumps(req))
        out = Path(tmp) / "out.json"
        t0 = time.perf_counter()
        proc = subprocess.run([str(python), str(HERE / "peers_worker.py"), str(Path(tmp) / "req.json"), str(out)],
                              env=env, capture_output=True, text=True, cwd=tmp)
        if proc.returncode != 0:
            return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
        data = json.loads(out.read_text())
    result: dict[str, Any] = {"torch": data["torch"], "threads": data["threads"], "viztracer": data["viztracer"],
                              "wall_s": round(time.perf_counter() - t0, 1),
                              "load": [round(load_before, 2), round(os.getloadavg()[0], 2)], "examples": {}}
    for name, passes in data["workloads"].items():
        result["examples"][name] = {}
        for pass_, got in passes.items():
            sec = got["seconds"]
            plain = sec["untraced"]
            factors = {m: _spread([t / u for t, u in zip(sec[m], plain)]) for m in sec if m != "untraced"}
            goals = {}
            for what, mode, peer, most_x in GOALS:
                ratio = _spread([a / b for a, b in zip(sec[mode], sec[peer])])
                goals[what] = {**ratio, "peer": peer, "goal": most_x, "met": ratio["factor"] <= most_x}
            result["examples"][name][pass_] = {"rounds": got["rounds"], "untraced_s": statistics.median(plain),
                                               "factors": factors, "goals": goals}
    return result


# ----------------------------------------------------------------------------- tables


def _x(c: dict[str, float]) -> str:
    return f"{c['factor']:.2f}x ({c['low']:.2f}–{c['high']:.2f})"


def markdown(doc: dict[str, Any]) -> dict[str, list[str]]:
    """The docs' tables of ``doc`` (workloads.json), line by line: ``peers``
    (docs/performance.md) and ``costs`` (docs/workloads.md); tests/test_docs.py checks
    that the pages hold them."""
    tables: dict[str, list[str]] = {}
    p = doc.get("peers") or {}
    if p.get("examples"):
        lines = ["| example | pass | untraced | " + " | ".join(h for _, h in PEER_COLUMNS)
                 + " | op layer / torch.profiler | Python layer / viztracer |",
                 "|" + "---|" * (len(PEER_COLUMNS) + 5)]
        for name, passes in p["examples"].items():
            for pass_, r in passes.items():
                goals = [r["goals"][what] for what, *_ in GOALS]
                lines.append(f"| {name} | {pass_} | {r['untraced_s'] * 1e3:.1f} ms | "
                             + " | ".join(_x(r["factors"][m]) for m, _ in PEER_COLUMNS) + " | "
                             + " | ".join(f"{_x(g)}: {'met' if g['met'] else 'missed'}" for g in goals) + " |")
        tables["peers"] = lines
    rows = [r for r in doc.get("rows", []) if "passes" in r and len(r["passes"]) == 2]
    if rows:
        lines = ["| example | untraced step | Python layer | op layer | native layer | list |",
                 "|---|---|---|---|---|---|"]
        for r in rows:
            f, b = r["passes"]
            title = TITLES.get((r["framework"], r["example"]), f"{r['framework']}: {r['example']}")
            cells = [f"{f['untraced_s'] * 1e3:.1f} / {b['untraced_s'] * 1e3:.1f} ms"
                     if f["untraced_s"] and b["untraced_s"] else "—"]
            cells += [f"{_short(f[layer])} / {_short(b[layer])}" for layer in ("python", "op", "native")]
            listed = LISTS.get(r["framework"], "")
            cells.append(f"{r['must_implement']} {listed}".strip() if r.get("must_implement") is not None else "—")
            lines.append(f"| {title} | " + " | ".join(cells) + " |")
        tables["costs"] = lines
    return tables


#: How docs/workloads.md names each example, and each framework's list.
TITLES = {("torch", "resnet18"): "torch: torchvision ResNet-18", ("torch", "bert_tiny"): "torch: BERT-tiny-like step",
          ("tensorflow", "mobilenet_v2"): "tensorflow: Keras MobileNetV2",
          ("chainer", "resnet50"): "chainer: ResNet-50", ("mxnet", "resnet18_v1"): "mxnet: Gluon ResNet-18 v1",
          ("jax", "mobilenet_v2"): "jax: Keras MobileNetV2"}
LISTS = {"torch": "ops (run)", "tensorflow": "kernels (registry)", "chainer": "(source)",
         "mxnet": "operators (recorded)", "jax": "StableHLO ops (compiled)"}


def show(doc: dict[str, Any]) -> None:
    print(f"{'framework':<11} {'example':<13} {'pass':<9} {'untraced':>10} {'python':>12} {'op':>12} {'native':>12}"
          f" {'list':>5}  probe s")
    for r in doc.get("rows", []):
        if "error" in r:
            print(f"{r['framework']:<11} {r['example']:<13} error: {r['error']}")
        elif "skeleton" in r:
            print(f"{r['framework']:<11} {r['example']:<13} skeleton: {r['ops']} ops, check "
                  f"{'passed' if r['skeleton'] else 'FAILED'} in {r['check_s']} s ({r['scaffold_s']} s in all)")
        else:
            for p in r["passes"]:
                untraced = "—" if p["untraced_s"] is None else f"{p['untraced_s'] * 1e3:.1f} ms"
                listed = r.get("must_implement")
                print(f"{r['framework']:<11} {r['example']:<13} {p['pass']:<9} {untraced:>10} "
                      f"{_short(p['python']):>12} {_short(p['op']):>12} {_short(p['native']):>12} "
                      f"{listed if listed is not None else '—':>5}  {r['probe_s']}")
    p = doc.get("peers") or {}
    if "error" in p:
        print(f"\npeers: error: {p['error']}")
    elif p:
        print(f"\npeers (torch {p['torch']}, {p['threads']} threads, viztracer {p['viztracer']}; load average "
              f"{p['load'][0]} before, {p['load'][1]} after): factor over the untraced step, median (quartiles) of "
              "the rounds")
        for name, passes in p["examples"].items():
            for pass_, r in passes.items():
                print(f"  {name} {pass_}: untraced {r['untraced_s'] * 1e3:.1f} ms, {r['rounds']} rounds")
                for mode, heading in PEER_COLUMNS:
                    print(f"    {heading:<28} {_x(r['factors'][mode])}")
                for what, g in r["goals"].items():
                    print(f"    goal: {what} at most {g['goal']}x {g['peer']}'s: {_x(g)}, "
                          f"{'met' if g['met'] else 'missed'}")
    for tag, lines in markdown(doc).items():
        print(f"\n<!-- figures: {tag} -->")
        print("\n".join(lines))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated frameworks to probe (default: all)")
    ap.add_argument("--skeleton", action="store_true", help="also time torch's skeleton check of its example")
    ap.add_argument("--no-probes", action="store_true", help="only the peers")
    ap.add_argument("--no-peers", action="store_true", help="only the probes")
    ap.add_argument("--rounds", default="15,41", help="the peers' rounds per pass: at least,at most (default 15,41)")
    ap.add_argument("--budget", type=float, default=20.0, help="seconds per pass past the least rounds (default 20)")
    ap.add_argument("--threads", type=int, default=1,
                    help="the peers' intra-op threads (default 1: on a shared machine a second thread waits at "
                         "each op's barrier for a core another process holds; 0: torch's default)")
    ap.add_argument("--show", action="store_true", help="print the tables of workloads.json; measure nothing")
    args = ap.parse_args()
    old = json.loads(OUT.read_text()) if OUT.exists() else {}
    if args.show:
        show(old)
        return 0
    only = [n for n in args.only.split(",") if n]
    doc = {"machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
                       "cores": os.cpu_count()},
           "date": time.strftime("%Y-%m-%d"), "rows": old.get("rows", []), "peers": old.get("peers", {})}
    if not args.no_probes:
        fresh = probes(only, args.skeleton)
        done = {(r["framework"], r["example"], "skeleton" in r) for r in fresh}
        doc["rows"] = [r for r in doc["rows"] if (r["framework"], r["example"], "skeleton" in r) not in done] + fresh
        doc["rows"].sort(key=lambda r: ([*registry.load()].index(r["framework"]), "skeleton" in r))
    if not args.no_peers:
        least, most = (int(n) for n in args.rounds.split(","))
        doc["peers"] = peers(least, most, args.budget, args.threads)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    show(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
