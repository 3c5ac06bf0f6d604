"""What recording each layer costs on a real model: every example in examples/ (a
real network from its framework's own model zoo, docs/workloads.md), probed on this
machine's CPU with all four layers by the real command, and each pass's figures read
from its trace: the untraced step, and the traced step over it for the Python tracer
and the framework's profiler, py-spy's sampled loop over the unsampled one, and the
probe's wall time. Also the must-implement count each framework's audit gives it (in
the framework's unit) and, for torch, the stand-in run's list and the skeleton's check.
A benchmark, not a test: run it and read the table.

    .venv/bin/python benchmarks/workloads.py [--only torch,jax] [--skeleton]

Writes benchmarks/workloads.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracer import registry  # noqa: E402
from tracer.analysis.workload_coverage import layer_costs  # noqa: E402
from tracer.trace import load  # noqa: E402

DLTRACE = str(Path(sys.executable).parent / "dltrace")


def _run(*args: str, timeout: float = 1800) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.perf_counter()
    proc = subprocess.run([DLTRACE, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return proc, time.perf_counter() - t0


def _factor(cost: dict) -> str:
    """A layer's cost as the audit words it (tracer.analysis.workload_coverage.Cost.said), short."""
    return "—" if cost["factor"] is None else cost["said"].replace("within noise", "noise").split(" (")[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated frameworks (default: all)")
    ap.add_argument("--skeleton", action="store_true", help="also time torch's skeleton check of its example")
    args = ap.parse_args()
    only = [n for n in args.only.split(",") if n]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, fw in registry.load().items():
            if only and name not in only:
                continue
            for ex_name, ex in fw.examples.items():
                out = Path(tmp) / f"{name}-{ex_name}.json"
                proc, wall = _run("probe", name, "--workload", str(ex.path), "-o", str(out))
                if proc.returncode != 0:
                    rows.append({"framework": name, "example": ex_name, "error": proc.stderr.strip()[-300:]})
                    continue
                costs = layer_costs(load(out))
                audit, audit_s = _run("audit", name, "--workload", str(ex.path), "--traces", tmp)
                found = re.search(r"what a \S+ backend must implement \((\d+) ([^;]+);", audit.stdout)
                rows.append({"framework": name, "example": ex_name, "probe_s": round(wall, 1),
                             "audit_s": round(audit_s, 1),
                             "must_implement": int(found.group(1)) if found else None,
                             "unit": found.group(2) if found else audit.stderr.strip()[-200:],
                             "passes": [{"pass": c.pass_, "untraced_s": c.untraced_s,
                                         **{layer: {**dataclasses.asdict(getattr(c, layer)),
                                                    "said": getattr(c, layer).said}
                                            for layer in ("python", "op", "native")}} for c in costs]})
        if args.skeleton and (not only or "torch" in only):
            ex = registry.load()["torch"].examples["resnet18"]
            proc, wall = _run("scaffold", "torch", "--workload", str(ex.path), "-o", str(Path(tmp) / "sk"), "--check")
            said = re.search(r"checked in ([\d.]+) s", proc.stdout)
            ops = re.search(r"registers (\d+) ops", proc.stdout)
            rows.append({"framework": "torch", "example": "resnet18", "skeleton": proc.returncode == 0,
                         "ops": int(ops.group(1)) if ops else None, "scaffold_s": round(wall, 1),
                         "check_s": float(said.group(1)) if said else None})
    print(f"{'framework':<11} {'example':<13} {'pass':<9} {'untraced':>10} {'python':>8} {'op':>8} {'native':>8}"
          f" {'list':>5}  probe s")
    for r in rows:
        if "error" in r:
            print(f"{r['framework']:<11} {r['example']:<13} error: {r['error']}")
        elif "skeleton" in r:
            print(f"{r['framework']:<11} {r['example']:<13} skeleton: {r['ops']} ops, check "
                  f"{'passed' if r['skeleton'] else 'FAILED'} in {r['check_s']} s ({r['scaffold_s']} s in all)")
        else:
            for p in r["passes"]:
                untraced = "—" if p["untraced_s"] is None else f"{p['untraced_s'] * 1e3:.1f} ms"
                print(f"{r['framework']:<11} {r['example']:<13} {p['pass']:<9} {untraced:>10} "
                      f"{_factor(p['python']):>8} {_factor(p['op']):>8} {_factor(p['native']):>8} "
                      f"{r['must_implement'] if r['must_implement'] is not None else '—':>5}  {r['probe_s']}")
    doc = {"machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
           "date": time.strftime("%Y-%m-%d"), "rows": rows}
    (ROOT / "benchmarks" / "workloads.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
