"""Native capture before and after its tuning: the same conv2d probe run per framework
with the untuned scheme (py-spy at 100 samples/s, no native env, no priming) and with
frameworks.yaml's ``native`` settings; prints samples, unwinding errors, bogus frames,
JIT samples and the loop's slowdown per pass.

    .venv/bin/python benchmarks/native_tuning.py [FRAMEWORK...] [--shapes 2x3x8x8,4x8x32x32]

Wall-clock figures: run it on a quiet machine (on a shared 2-core one the slowdowns
vary by 2-5x between runs; sample and error counts are steadier).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tracer import registry  # noqa: E402
from tracer.contract import LAYERS  # noqa: E402
from tracer.registry import parse_shape  # noqa: E402
from tracer.registry_entries import Framework, NativeSpec  # noqa: E402
from tracer.runner import CaseSpec, run_probe  # noqa: E402


def untuned(fw: Framework) -> Framework:
    return dataclasses.replace(fw, native=NativeSpec(rate=100, seconds=fw.native.seconds, env={}, prime=False))


def measure(fw: Framework, shape: tuple[int, ...], scheme: str) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="dltrace-bench-") as tmp:
        t0 = time.time()
        (res,) = run_probe(fw, [CaseSpec("conv2d", "functional", shape, layers=LAYERS)], Path(tmp), timeout=900)
        wall = time.time() - t0
        if res.error:
            return [{"scheme": scheme, "error": res.error}]
        t = res.load()
    rows = []
    for run in t.runs:
        if run.phase == "warm":
            st = run.stats.get("layers", {}).get("native", {})
            rows.append({"scheme": scheme, "pass": run.pass_, "rate": st.get("rate"), "samples": st.get("samples"),
                         "errors": st.get("errors"), "bad": st.get("bad_frames"), "jit": st.get("jit_samples"),
                         "slowdown": st.get("slowdown"), "wall_s": round(wall, 1),
                         "error": run.stats.get("native_error", "")})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("frameworks", nargs="*")
    ap.add_argument("--shapes", default="2x3x8x8,4x8x32x32")
    args = ap.parse_args()
    fws = registry.load()
    print(f"{'framework':11}{'shape':11}{'scheme':8}{'pass':9}{'rate':>5}{'samples':>8}{'errors':>7}{'bad':>5}"
          f"{'jit':>5}{'slowdown':>9}{'wall s':>7}")
    for name in args.frameworks or list(fws):
        for shape in args.shapes.split(","):
            for scheme, fw in (("before", untuned(fws[name])), ("after", fws[name])):
                for r in measure(fw, parse_shape(shape), scheme):
                    if r.get("error") and "pass" not in r:
                        print(f"{name:11}{shape:11}{scheme:8}{r['error']}")
                        continue
                    print(f"{name:11}{shape:11}{scheme:8}{r['pass']:9}{r['rate']!s:>5}{r['samples']!s:>8}{r['errors']!s:>7}"
                          f"{r['bad']!s:>5}{r['jit']!s:>5}{r['slowdown']!s:>9}{r['wall_s']:>7}  {r['error']}")


if __name__ == "__main__":
    main()
