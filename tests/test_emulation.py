"""Emulated aarch64 CPUs (tracer.emulation): the files that describe each CPU, the
command line, the launcher's exit statuses and pip's markers, tested without
emulating anything; and one real run of torch on an emulated A64FX."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import dltrace, one_line_error
from tracer import emulation
from tracer.emulation import cpus, debian, layout, wheels
from tracer.emulation import guest as cmd
from tracer.emulation.launch import __file__ as LAUNCH
from tracer.errors import DltraceError, EnvNotReady, UsageError
from tracer.registry import ROOT

from tracer import registry

#: the torch build the emulated environment uses (frameworks.yaml torch: aarch64)
TORCH_REQUIREMENTS = list(registry.load()["torch"].aarch64.requirements)


# ----------------------------------------------------------------------------- CPU description


def test_hwcap_bits_are_named_as_the_kernel_lists_them():
    # QEMU 7.2's a64fx: AT_HWCAP 0x415ffb
    assert cpus.features_from_hwcaps(0x415FFB) == (
        "fp", "asimd", "aes", "pmull", "sha1", "sha2", "crc32", "atomics", "fphp", "asimdhp", "cpuid", "asimdrdm",
        "fcma", "dcpop", "sve")
    # AT_HWCAP bits first, then AT_HWCAP2; an unnamed bit is kept, not dropped
    assert cpus.features_from_hwcaps(1 << 22, (1 << 1) | (1 << 63)) == ("sve", "sve2", "hwcap2_bit63")
    assert cpus.features_from_hwcaps(0) == ()


def test_every_model_names_its_chip_in_qemu_and_in_the_midr():
    models = emulation.cpu_models()
    assert set(models) == {"a64fx", "neoverse-n1", "sve256", "sve128", "cortex-a57"}
    for m in models.values():
        assert m["qemu_spec"] == f"{m['qemu_cpu']},midr={m['midr']:#x}"
        assert m["description"] and m["features"][:2] == ["fp", "asimd"]
    assert models["a64fx"]["midr_hex"] == "0x461f0010" and "sve" in models["a64fx"]["features"]
    assert "sve" not in models["neoverse-n1"]["features"] and "asimddp" in models["neoverse-n1"]["features"]
    assert "atomics" not in models["cortex-a57"]["features"]  # ARMv8.0: no LSE
    assert models["sve256"]["qemu_cpu"] == "max,sme=off,sve-default-vector-length=32"  # never plain max (SME)
    assert models["sve128"]["qemu_cpu"] == "max,sme=off,sve-default-vector-length=16"


def test_cpuinfo_has_one_block_per_cpu_with_the_midr_fields():
    text = cpus.cpuinfo_text(cpus.MODELS["neoverse-n1"], 3)
    blocks = [b for b in text.split("\n\n") if b.strip()]
    assert len(blocks) == 3 and blocks[2].startswith("processor\t: 2\n")
    fields = dict(re.findall(r"^([^\t:]+?)\s*: (.*)$", blocks[0], re.MULTILINE))
    # 0x413fd0c1: implementer Arm, variant 3, part 0xd0c (Neoverse-N1), revision 1
    assert (fields["CPU implementer"], fields["CPU variant"], fields["CPU part"], fields["CPU revision"]) == \
        ("0x41", "0x3", "0xd0c", "1")
    assert fields["Features"] == " ".join(cpus.MODELS["neoverse-n1"].features)
    assert "Features\t: fp sve\n" in cpus.cpuinfo_text(cpus.MODELS["a64fx"], 1, ("fp", "sve"))


def test_sysfs_gives_the_midr_caches_and_cpu_lists():
    files = cpus.sysfs_files(cpus.MODELS["a64fx"], 2)
    cpu = "devices/system/cpu"
    assert files[f"{cpu}/online"] == files[f"{cpu}/possible"] == "0-1\n"
    # xbyak_aarch64 reads cpu0's MIDR with strtoull(..., 16): A64FX is known by it
    assert files[f"{cpu}/cpu0/regs/identification/midr_el1"] == "0x00000000461f0010\n"
    assert int(files[f"{cpu}/cpu1/regs/identification/midr_el1"], 16) == 0x461F0010
    caches = {files[f"{cpu}/cpu1/cache/index{i}/level"] + files[f"{cpu}/cpu1/cache/index{i}/type"]:
              (files[f"{cpu}/cpu1/cache/index{i}/size"], files[f"{cpu}/cpu1/cache/index{i}/shared_cpu_list"])
              for i in range(3)}
    assert caches == {"1\nData\n": ("64K\n", "1\n"), "1\nInstruction\n": ("64K\n", "1\n"),
                      "2\nUnified\n": ("8192K\n", "0-1\n")}
    assert "devices/system/node/node0/cpu1/online" in files
    assert cpus.sysfs_files(cpus.MODELS["cortex-a57"], 1)[f"{cpu}/online"] == "0\n"


# ----------------------------------------------------------------------------- building


def test_the_debian_mirror_is_the_one_apt_uses(tmp_path, monkeypatch):
    monkeypatch.delenv("DLTRACE_DEBIAN_MIRROR", raising=False)
    deb822 = tmp_path / "debian.sources"
    deb822.write_text("Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
                      "Types: deb-src\nURIs: http://src.example/debian\n\n"
                      "Types: deb\n# a comment\nURIs: http://mirror.example/debian/\nSuites: bookworm\n")
    one_line = tmp_path / "sources.list"
    one_line.write_text("# deb http://old.example/debian bookworm main\n"
                        "deb http://archive.ubuntu.com/ubuntu jammy main\n"
                        "deb [arch=amd64 signed-by=/k.gpg] https://local.example/debian bookworm main\n")
    assert debian.debian_mirror([deb822]) == "http://mirror.example/debian"
    assert debian.debian_mirror([one_line, deb822]) == "https://local.example/debian"
    ubuntu = tmp_path / "ubuntu.list"
    ubuntu.write_text("deb http://archive.ubuntu.com/ubuntu jammy main\n")
    assert debian.debian_mirror([ubuntu, tmp_path / "missing.list"]) == "http://deb.debian.org/debian"
    monkeypatch.setenv("DLTRACE_DEBIAN_MIRROR", "http://override.example/debian/")
    assert debian.debian_mirror([deb822]) == "http://override.example/debian"


def test_environment_names_and_missing_environments(tmp_path, monkeypatch):
    monkeypatch.setenv("DLTRACE_HOME", str(tmp_path))
    for bad in ("", "../x", "a/b", "_base", "-x"):
        with pytest.raises(UsageError):
            layout.env_dir(bad)
    assert layout.env_dir("torch-2.9") == tmp_path / "emulated" / "torch-2.9"
    assert emulation.status("torch") is None
    with pytest.raises(EnvNotReady, match="emulated environment torch is not set up"):
        emulation.command("torch", "a64fx", [])
    with pytest.raises(UsageError, match="choose from: a64fx, neoverse-n1"):
        cmd.model("max")
    # a changed requirement list is another environment
    assert wheels.env_spec(["torch==2.9.1"]) != wheels.env_spec(["torch==2.9.1", "numpy"])


def test_pip_installs_for_the_guest_and_evaluates_markers_as_aarch64(tmp_path):
    # a wheel that needs a package only on x86_64, as torch 2.9.1 needs nvidia-* there:
    # evaluated for the x86 host, pip would look for it and fail
    wheel_dir = tmp_path / "wheels"
    wheel_dir.mkdir()
    with zipfile.ZipFile(wheel_dir / "probe_pkg-1.0-py3-none-any.whl", "w") as whl:
        whl.writestr("probe_pkg/__init__.py", "")
        whl.writestr("probe_pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: probe-pkg\nVersion: 1.0\n"
                     "Requires-Dist: no-such-x86-only-package; platform_machine == \"x86_64\"\n"
                     "Requires-Dist: no-such-old-python-package; python_version < \"3.11\"\n")
        whl.writestr("probe_pkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                     "Tag: py3-none-any\n")
        whl.writestr("probe_pkg-1.0.dist-info/RECORD", "")
    argv = wheels.pip_command(tmp_path / "site", ["probe-pkg"])
    for tag in ("manylinux2014_aarch64", "manylinux_2_17_aarch64", "manylinux_2_28_aarch64", "manylinux_2_35_aarch64"):
        assert argv[argv.index(tag) - 1] == "--platform"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    proc = subprocess.run([*argv, "--no-index", "--find-links", str(wheel_dir)], check=False, capture_output=True,
                          text=True, env={**env, "PIP_CONFIG_FILE": os.devnull}, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert wheels.installed_versions(tmp_path / "site") == {"probe-pkg": "1.0"}


# ----------------------------------------------------------------------------- the command


def test_proot_command_binds_the_cpu_the_wheels_and_the_callers_folders(tmp_path):
    cpu_dir, site = tmp_path / "cpu", tmp_path / "site"
    code = tmp_path / "dltrace-code" / "tracer"
    argv = cmd.proot_argv(Path("/r"), site, cpu_dir, "a64fx,midr=0x461f0010",
                          [tmp_path / "x" / "..", ROOT, (ROOT / "tracer", code)],
                          "/usr/bin/qemu-aarch64-static", "/usr/bin/proot")
    assert argv[:5] == ["/usr/bin/proot", "-q", "/usr/bin/qemu-aarch64-static -cpu a64fx,midr=0x461f0010", "-r", "/r"]
    binds = [argv[i + 1] for i, a in enumerate(argv) if a == "-b"]
    assert binds == ["/proc", "/dev", "/tmp", f"{cpu_dir}/cpuinfo:/proc/cpuinfo", f"{cpu_dir}/sys:/sys",
                     f"{site}:/usr/local/lib/python3.11/dist-packages", str(tmp_path.resolve()), str(ROOT),
                     f"{ROOT / 'tracer'}:{code.resolve()}"]
    assert argv[-1] == "/usr/bin/python3"


def _launch(script: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", "-S", LAUNCH, "sh", "-c", script], check=False, capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=60)


def test_the_launcher_ends_as_the_guest_did():
    # proot exits 255 when its guest dies by a signal; qemu has named the signal
    proc = _launch('echo "qemu: uncaught target signal 4 (Illegal instruction) - core dumped" >&2; exit 255')
    assert proc.returncode == -4
    assert "uncaught target signal 4" in proc.stderr  # passed on as it was
    assert _launch("echo out; echo err >&2; exit 3").returncode == 3
    assert _launch("exit 255").returncode == 255  # no signal named: a plain status
    assert _launch("kill -SEGV $$").returncode == -11


def test_the_launcher_keeps_die_with_parent_working():
    # the guest's parent is proot: it is told proot's pid, and the launcher checks the caller's
    proc = _launch('[ "$DLTRACE_PARENT_PID" = "$$" ] && echo mine', {"DLTRACE_PARENT_PID": str(os.getpid())})
    assert (proc.returncode, proc.stdout.strip()) == (0, "mine")
    assert _launch("echo ran", {"DLTRACE_PARENT_PID": "1"}).stdout == ""  # not our caller: ends at once


# ----------------------------------------------------------------------------- real emulation

CONV = """
import os, sys, ctypes
import torch
from tracer.contract import CONV_K  # the project's code, from the caller's PYTHONPATH
print("cpu:", os.environ.get("DLTRACE_EMULATED_CPU"), "cwd:", os.getcwd(), flush=True)
print(open("/proc/cpuinfo").read().split("\\n\\n")[0].replace("\\n", " | "), flush=True)
x = torch.randn(8, 16, 16, 16, requires_grad=True)
w = torch.randn(16, 16, CONV_K, CONV_K, requires_grad=True)
torch.nn.functional.conv2d(x, w, padding=1).sum().backward()
sys.stdout.flush(); ctypes.CDLL(None).fflush(None)
print("torch", torch.__version__, "done", flush=True)
"""


def _missing_host_tools() -> str:
    try:
        for program in layout.HOST_PACKAGES:
            layout.tool(program)
    except DltraceError as exc:
        return str(exc)
    return ""


@pytest.mark.frameworks
def test_torch_conv2d_on_an_emulated_a64fx_runs_onednn_sve512(tmp_path):
    # the set-up (make test) installs QEMU, proot and debootstrap: without them this fails, it does not skip
    assert not _missing_host_tools(), _missing_host_tools()
    # builds the environment from nothing where DLTRACE_HOME has none (about 1 min)
    emulation.setup("torch", TORCH_REQUIREMENTS)
    # the files in /proc/cpuinfo come from the HWCAPs this QEMU gives: the table is what 7.2 gives
    for name, model in cpus.MODELS.items():
        assert cpus.features_from_hwcaps(*emulation.emulated_hwcaps(name)) == model.features, name
    argv, extra = emulation.command("torch", "a64fx", [ROOT, tmp_path])
    env = {**os.environ, **extra, "ONEDNN_VERBOSE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([*argv, "-c", CONV], check=False, capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert f"cpu: a64fx cwd: {tmp_path}" in out
    assert "CPU implementer\t: 0x46" in out and "sve" in out  # the fake /proc/cpuinfo
    assert "isa:AArch64 SVE (512 bits)" in out
    convs = {pass_: impl for impl, pass_ in re.findall(r",convolution,([^,]+),(\w+),", out)}
    assert set(convs) == {"forward_training", "backward_data", "backward_weights"}, out
    assert all("sve_512" in impl for impl in convs.values()), convs  # brgconv:sve_512, jit:sve_512
    assert "torch 2.13.0" in out and out.rstrip().endswith("done")


@pytest.mark.parametrize("where", ["DLTRACE_HOME", "TMPDIR"])
def test_a_colon_in_a_bound_path_is_one_line_naming_the_setting(tmp_path, monkeypatch, where):
    from tracer.emulation import guest, layout

    odd = tmp_path / "a:b"
    odd.mkdir()
    monkeypatch.setenv("DLTRACE_HOME", str(odd if where == "DLTRACE_HOME" else tmp_path / "home"))
    monkeypatch.setenv("TMPDIR", str(odd if where == "TMPDIR" else tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    ok = tmp_path / "plain"
    if where == "DLTRACE_HOME":
        cpu_dir = odd / "emulated" / "_cpus" / "a64fx"
        call = lambda: guest.proot_argv(ok, ok, cpu_dir, "max", [])  # noqa: E731
    else:
        call = lambda: guest.proot_argv(ok, ok, ok, "max", [odd / "dltrace-x"])  # noqa: E731
    with pytest.raises(layout.DltraceError, match=f"set {where} to a path without ':'"):
        call()
    assert guest.proot_argv(ok, ok, ok, "max", [ok])[-1] == "/usr/bin/python3"


def test_a_colon_in_dltrace_home_is_said_before_anything_emulated(tmp_path):
    line = one_line_error(dltrace("probe", "torch", "relu", "--cpu", "a64fx",
                                  env={"DLTRACE_HOME": str(tmp_path / "home:x")}, timeout=60))
    assert "set DLTRACE_HOME to a path without ':'" in line and "No module named" not in line


@pytest.mark.frameworks
def test_a_colon_in_tmpdir_is_one_line_for_an_emulated_probe(tmp_path):
    from tracer import emulation

    if emulation.status("torch") is None:
        pytest.fail("torch's emulated aarch64 environment must be set up (dltrace env setup torch --arch aarch64)")
    odd = tmp_path / "a:b"
    odd.mkdir()
    line = one_line_error(dltrace("probe", "torch", "relu", "--cpu", "a64fx", "--layers", "python",
                                  env={"TMPDIR": str(odd)}, timeout=300))
    assert "set TMPDIR to a path without ':'" in line and "No module named" not in line
