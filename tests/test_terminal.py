"""What reaches a terminal cannot act on it (tracer/render/terminal.py on its own, then
the real `dltrace` printing hostile traces): names are cut with a count, escapes and
markup in input stay text, narrow or ASCII terminals get records and escapes. Names in
a trace come from other machines and other people. Fast tier."""

from __future__ import annotations

import io
import re

import pytest
from rich.text import Text

from tests.conftest import dltrace, one_line_error, write_pair
from tracer.contract import Exit
from tracer.render.terminal import (NAME_WIDTH, TerminalSafe, clip, message, safe, safe_console,
                                    table_or_records)


@pytest.mark.parametrize("raw, shown", [
    ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),            # OSC: retitle the window
    ("a\x1b[2Jb", "a\\x1b[2Jb"),                          # CSI: clear the screen
    ("\x9b31m", "\\x9b31m"),                              # C1 CSI
    ("x\x7fy\x00z", "x\\x7fy\\x00z"),                     # DEL, NUL
    ("evil\u202egnp.exe", "evil\\u202egnp.exe"),          # right-to-left override
    ("\u2066iso\u2069", "\\u2066iso\\u2069"),             # bidirectional isolates
    ("half \ud800 pair", "half \\ud800 pair"),            # a lone surrogate
])
def test_safe_escapes_what_would_act_on_the_terminal(raw: str, shown: str) -> None:
    assert safe(raw) == shown
    assert safe(shown) == shown  # escaping is idempotent: an escape is plain text


def test_safe_keeps_ordinary_text_newlines_tabs_and_non_ascii() -> None:
    text = "aten::conv2d\tµs\n→ C  tensorflow::ConvOp<…>::Compute  日本"
    assert safe(text) == text


def test_clip_cuts_long_names_and_says_how_much() -> None:
    assert clip("x" * NAME_WIDTH) == "x" * NAME_WIDTH
    cut = clip("y" * 100_000)
    assert len(cut) < NAME_WIDTH + 20 and cut.startswith("y" * (NAME_WIDTH - 20))
    assert cut.endswith(f"… (+{100_000 - NAME_WIDTH + 20} chars)")
    assert clip("abcdefghijklmnopqrstuvwxyz", 22) == "ab… (+24 chars)"


def test_a_safe_console_escapes_data_but_keeps_its_own_styling() -> None:
    buf = io.StringIO()
    console = safe_console(file=buf, force_terminal=True, color_system="standard", width=80)
    console.print(Text("name\x1b[31m", style="bold"))
    out = buf.getvalue()
    assert "name\\x1b[31m" in out           # the data's escape is shown, not run
    assert "\x1b[1m" in out                 # rich's own bold still reaches the terminal
    assert out.count("\x1b[31m") == 0


def test_message_prints_markup_in_input_as_text() -> None:
    buf = io.StringIO()
    console = safe_console(file=buf, width=200, color_system=None)
    console.print(message("!", "red", "unknown framework '[/bold]torch[link=x]'"))
    assert buf.getvalue() == "! unknown framework '[/bold]torch[link=x]'\n"
    assert len(message("!", "red", "z" * 10_000).plain) < 4 * NAME_WIDTH + 30


def test_terminal_safe_stream_escapes_on_the_way() -> None:
    buf = io.StringIO()
    TerminalSafe(buf).write("f;\x1b[2J;3\n")
    assert buf.getvalue() == "f;\\x1b[2J;3\n"


def test_table_or_records_by_width() -> None:
    rows = [["torch", "2.13.0", "ready"], ["jax", "0.10.2", "missing"]]
    wide, narrow = io.StringIO(), io.StringIO()
    safe_console(file=wide, width=120, color_system=None).print(
        table_or_records("envs", ["framework", "version", "status"], rows, 120))
    safe_console(file=narrow, width=20, color_system=None).print(
        table_or_records("envs", ["framework", "version", "status"], rows, 20))
    assert "┃ framework" in wide.getvalue() and "version: 0.10.2" not in wide.getvalue()
    assert narrow.getvalue().splitlines() == ["envs", "torch", "  version: 2.13.0", "  status: ready",
                                              "jax", "  version: 0.10.2", "  status: missing"]


ESCAPES = "\x1b]0;pwned\x07\x1b[2J"


def test_escape_sequences_in_traces_never_reach_the_terminal(tmp_path):
    a, b = write_pair(tmp_path, "aten::mkldnn_convolution", f"aten::evil{ESCAPES}kernel")
    for env in ({}, {"FORCE_COLOR": "1", "TERM": "xterm-256color"}):  # a pipe, and a colour terminal
        proc = dltrace("diff", str(a), str(b), env=env)
        assert proc.returncode == 0, proc.stderr
        assert "\x1b]" not in proc.stdout and "\x1b[2J" not in proc.stdout and "\x07" not in proc.stdout
        assert "aten::evil\\x1b]0;pwned" in proc.stdout and "\\x1b[2Jkernel" in proc.stdout


def test_a_probes_stderr_is_made_safe(fake_frameworks):
    line = one_line_error(dltrace("probe", "crashy", "avgpool2d", env=fake_frameworks))
    assert "SIGSEGV" in line and "\x1b" not in line and "\\x1b]0;pwned" in line


def test_rich_markup_in_input_is_printed_as_it_is(tmp_path):
    line = one_line_error(dltrace("probe", "[/bold][red]x", "conv2d"), Exit.USAGE)
    assert "unknown framework '[/bold][red]x'" in line


def test_a_huge_name_does_not_flood_the_console(tmp_path):
    a, b = write_pair(tmp_path, "aten::mkldnn_convolution", "aten::" + "z" * 100_000)
    proc = dltrace("diff", str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout) < 20_000 and "chars)" in proc.stdout


def test_a_lone_surrogate_does_not_stop_the_output(tmp_path):
    a, b = write_pair(tmp_path, "aten::mkldnn_convolution", "aten::thnn_conv2d")
    b.write_text(b.read_text().replace("aten::thnn_conv2d", "aten::thnn\\udc80conv2d"))
    proc = dltrace("diff", str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    assert "aten::thnn\ufffdconv2d" in proc.stdout


def test_a_narrow_terminal_gets_records_not_empty_cells():
    proc = dltrace("list", env={"COLUMNS": "20"})
    assert proc.returncode == 0, proc.stderr
    assert "│  │" not in proc.stdout
    for name in ("torch", "tensorflow", "chainer", "mxnet", "jax"):
        assert re.search(rf"^{name}$", proc.stdout, re.M), proc.stdout


def test_an_ascii_terminal_gets_escapes_not_a_codec_error(tmp_path):
    a, b = write_pair(tmp_path, "aten::mkldnn_convolution", "aten::thnn_conv2d\u00e9")
    proc = dltrace("diff", str(a), str(b), env={"PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "aten::thnn_conv2d\\xe9" in proc.stdout and "split" in proc.stdout
