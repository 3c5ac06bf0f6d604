"""The documentation cannot drift from the code and the measurements: every relative
link in README.md, CHANGELOG.md and docs/*.md resolves (file and heading), the README
stays a five-minute read, the figures the docs quote match benchmarks/results.json, the
survey record benchmarks/survey.json and the registry, the recording costs
benchmarks/workloads.json, and the trace format's version
history matches tracer.trace.HISTORY (and the gap record's tracer.gap.HISTORY). Fast tier:
no framework environment."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tracer import gap, registry
from tracer.cli import main
from tracer.survey import RECORD_FORMAT, SurveyRecord
from tracer.trace import HISTORY, VERSION

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *DOCS]
RESULTS = json.loads((ROOT / "benchmarks" / "results.json").read_text())
#: the survey.json of the survey the README and CHANGELOG quote (its report's figures left out)
SURVEY = json.loads((ROOT / "benchmarks" / "survey.json").read_text())

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _links(page: Path) -> list[str]:
    """Markdown links outside code blocks."""
    return _LINK.findall(_FENCE.sub("", page.read_text()))


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in _FENCE.sub("", page.read_text()).splitlines():
        if line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return out


def test_pages_exist_and_read_in_order() -> None:
    names = {p.name for p in DOCS}
    for want in ("concepts.md", "commands.md", "gpu.md", "arm.md", "standin.md", "trace-format.md",
                 "bad-input.md", "performance.md", "adding-a-framework.md", "development.md"):
        assert want in names, want
    for page in DOCS:
        if page.name in ("development.md", "fleet.md"):
            continue
        assert "\nNext: [" in page.read_text(), f"{page.name} does not link the next page"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    bad = []
    for link in _links(page):
        if re.match(r"[a-z]+:", link):  # http:, https:, mailto:
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        rel = target.relative_to(ROOT).as_posix() if target.is_relative_to(ROOT) else str(target)
        if not target.exists():
            bad.append(f"{link}: no such file")
            continue
        if anchor and target.suffix == ".md" and anchor not in _anchors(target):
            bad.append(f"{link}: no heading #{anchor} in {rel}")
    assert not bad, f"{page.name}: " + "; ".join(bad)


def test_readme_is_short_and_starts_with_one_framework() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    quick = text.index("## Quick start")
    assert text.index("dltrace env setup torch") > quick and text.index("dltrace probe torch conv2d") > quick
    # the picture of the report is a real screenshot (PNG), not a placeholder
    shot = ROOT / "docs" / "img" / "report.png"
    assert "(docs/img/report.png)" in text and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "TODO" not in text


def test_readme_commands_exist() -> None:
    """The commands the README and docs/commands.md name are the command line's."""
    listed = CliRunner().invoke(main, ["--help"]).output
    commands = set(re.findall(r"^  ([a-z]+) ", listed, re.M))
    blocks = "".join(_FENCE.findall((ROOT / "README.md").read_text() + (ROOT / "docs" / "commands.md").read_text()))
    quoted = set(re.findall(r"^(?:\.venv/bin/)?dltrace ([a-z]+)", blocks, re.M))
    assert quoted and quoted <= commands, quoted - commands


# ----------------------------------------------------------------------------- figures


def _table(page: str, tag: str) -> list[list[str]]:
    """The rows (cells stripped) of the table after ``<!-- figures: TAG ...-->`` in docs/PAGE."""
    lines = (ROOT / "docs" / page).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"<!-- figures: {tag} "))
    rows = []
    for line in lines[start + 1:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return [r for r in rows[2:]]  # no header, no rule


def _num(cell: str) -> float:
    m = re.search(r"[\d,]*\.?\d+", cell)
    assert m, cell
    return float(m.group().replace(",", ""))


def _same(cell: str, value: Any, places: int) -> None:
    assert _num(cell) == pytest.approx(round(float(value), places), abs=10 ** -places / 2 + 1e-9), (cell, value)


def test_overhead_table_is_results_json() -> None:
    columns = ("dltrace-python", "dltrace", "dltrace-in-step", "viztracer", "cprofile", "empty-hooks")
    rows = _table("performance.md", "overhead")
    assert {r[0].split()[0] for r in rows} == set(RESULTS["overhead"])
    for row in rows:
        name, version = row[0].split()
        fw = RESULTS["overhead"][name]
        assert fw["version"].startswith(version)
        for cell, col in zip(row[1:], columns):
            _same(cell, fw["geomean_ratio"][col], 2)
        met = fw["geomean_ratio"]["dltrace"] <= fw["geomean_ratio"]["viztracer"]
        assert row[-1] == ("met" if met else "missed")


def test_survey_table_is_results_json() -> None:
    s = RESULTS["survey"]
    wall, cpu = _table("performance.md", "survey")
    _same(wall[1], s["bare_s"], 1), _same(wall[2], s["survey_s"], 1), _same(wall[3], s["ratio"], 2)
    _same(cpu[1], s["bare_cpu_s"], 1), _same(cpu[2], s["survey_cpu_s"], 1), _same(cpu[3], s["cpu_ratio"], 2)
    assert ("≤ 2x: met" in wall[4]) == (s["ratio"] <= 2)
    text = (ROOT / "docs" / "performance.md").read_text()
    assert f"{s['jobs']} probe jobs, {s['cases']} cases" in text


def _clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"


def _words(page: str) -> str:
    return " ".join((ROOT / page).read_text().split())  # one space between words, lines joined


def test_survey_times_are_the_survey_record() -> None:
    """The survey time the README and CHANGELOG quote, and its stages, are its survey.json's."""
    assert SURVEY["format"] == RECORD_FORMAT
    # what a survey writes; a record older than a field (job_seconds) reads with its default
    record = SurveyRecord(**{k: SURVEY[k] for k in SurveyRecord.__dataclass_fields__ if k in SURVEY})
    seconds = record.seconds
    assert not any(word.startswith("/") for word in record.command.split())  # no path of a machine
    readme, changelog = _words("README.md"), _words("CHANGELOG.md")
    total = _clock(seconds["total"])
    assert f"`make survey` with the environments already built: **{total}**" in readme
    assert f"{seconds['probing']:.1f} s probing {record.cases} cases, {seconds['report']:.1f} s the report" \
        in readme
    assert f"`make survey` with the environments built {total} (its `survey.json`" in changelog
    assert (f"{seconds['probing']:.1f} s probing, {seconds['imports']:.1f} s imports, {seconds['derive']:.1f} s "
            f"derive, {seconds['report']:.1f} s report; {record.jobs} jobs, {record.cases} cases, "
            f"{record.gaps} gaps") in changelog
    assert f"({record.started[:10]}, its `survey.json`" in readme  # the day it ran


def test_scaling_table_is_results_json() -> None:
    rows = _table("performance.md", "scaling")
    diff = {d["frames"]: d for d in RESULTS["diff"]}
    report = {r["frames"]: r for r in RESULTS["report"]}
    assert [int(_num(r[0])) for r in rows] == sorted(diff)
    for row in rows:
        frames = int(_num(row[0]))
        _same(row[1], diff[frames]["cpu_s"], 3)
        _same(row[2], diff[frames]["us_per_frame"], 1)
        if frames in report:
            _same(row[3], report[frames]["seconds"], 2)
        else:
            assert row[3] == ""


def test_pipeline_table_is_results_json() -> None:
    keys = {"`diff A B --json` (1M-frame pair)": "diff", "`report` (the pair)": "report",
            "`export collapsed` (1M frames)": "export_collapsed",
            "`export speedscope` (1M frames)": "export_speedscope",
            "`export collapsed` (200k deep)": "deep_collapsed", "`export speedscope` (200k deep)": "deep_speedscope",
            "`diff` (200k deep, with itself)": "deep_diff"}
    rows = _table("performance.md", "pipeline")
    assert [r[0] for r in rows] == list(keys)
    for row in rows:
        got = RESULTS["pipeline"][keys[row[0]]]
        assert got["ok"]
        _same(row[1], got["seconds"], 1)
        assert int(row[2]) == round(got["peak_mib"])


def _workload_tables() -> dict[str, list[str]]:
    """benchmarks/workloads.py's Markdown tables of benchmarks/workloads.json."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_workloads", ROOT / "benchmarks" / "workloads.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tables: dict[str, list[str]] = module.markdown(json.loads((ROOT / "benchmarks" / "workloads.json").read_text()))
    return tables


@pytest.mark.parametrize("page, tag", [("performance.md", "peers"), ("workloads.md", "costs")])
def test_workload_cost_tables_are_workloads_json(page: str, tag: str) -> None:
    """The recording costs on the examples, and beside the peers, are benchmarks/workloads.json's
    (as benchmarks/workloads.py --show writes them)."""
    want = _workload_tables()[tag]
    lines = (ROOT / "docs" / page).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"<!-- figures: {tag} "))
    got = lines[start + 1:start + 1 + len(want)]
    assert got == want and not lines[start + 1 + len(want)].startswith("|")


def test_reference_profile_counts() -> None:
    """"fourteen reference GPU profiles" (every survey imports them), "ten" of them Kineto traces."""
    imported = [path for fw in registry.load().values() for path in fw.imported]
    kineto = sorted((ROOT / "tracer" / "reference" / "imported").glob("*.kineto.json.gz"))
    assert len(imported) == 14 and len(kineto) == 10
    assert sum(str(p).endswith(".kineto.json.gz") for p in imported) == 10
    text = " ".join(" ".join(p.read_text().split()) for p in PAGES)  # one space between words
    for wrong in ("eight real", "nine real", "the eight `torch.profiler`", "eight `torch.profiler`"):
        assert wrong not in text, wrong
    assert "fourteen files, ten of them `torch.profiler` traces" in text
    assert "fourteen reference GPU profiles" in " ".join((ROOT / "README.md").read_text().split())


# ----------------------------------------------------------------------------- trace format


def test_trace_format_history_is_listed() -> None:
    text = (ROOT / "docs" / "trace-format.md").read_text()
    section = text[text.index("## Version history"):]
    for version, date, what in HISTORY:
        assert f"| {version} | {date} | {what} |" in section
    assert f'"version": {VERSION},' in text and f"versions 1 to {VERSION}" in section


def test_gap_record_history_is_listed() -> None:
    text = (ROOT / "docs" / "trace-format.md").read_text()
    section = text[text.index("## The gap record"):]
    for version, date, what in gap.HISTORY:
        assert f"| {version} | {date} | {what} |" in section
    assert f'{{"{gap.VERSION_FIELD}": {gap.VERSION},' in section and f"versions 1 to {gap.VERSION}" in section
