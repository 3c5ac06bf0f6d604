"""The emulated ARM CPUs, and the files that tell software which CPU it runs on.

QEMU's user mode emulates the instructions and the ELF hardware capabilities
(``getauxval(AT_HWCAP)``) of the CPU model it is given, and the ``midr=``
property sets the MIDR_EL1 that the ``mrs`` instruction reads. It does not fake
the files the kernel describes the CPU with: QEMU 7.2 passes the host's x86
``/proc/cpuinfo`` through (PyTorch's cpuinfo library then crashes in its ARM
initialisation) and the host's sysfs has no MIDR at all, while oneDNN
(xbyak_aarch64) identifies an A64FX by its sysfs MIDR and reads cache sizes from
sysfs for other chips. This module holds each model's identity as data and writes
those files from it: ``/proc/cpuinfo``, and a ``/sys/devices/system`` tree with
the CPUs, their MIDR, caches and topology, and one NUMA node.

The feature list in /proc/cpuinfo is derived from the HWCAP bits the emulator
really reports for the model (:func:`features_from_hwcaps`), so that the file and
``getauxval`` cannot disagree; :attr:`CpuModel.features` records what QEMU 7.2
reports (measured), for people to read and for a test to notice a QEMU that
differs.

Pure functions and data: nothing here runs anything.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: Linux arm64 HWCAP bit -> the name /proc/cpuinfo prints (arch/arm64/include/uapi/
#: asm/hwcap.h and the kernel's hwcap_str table; the kernel lists AT_HWCAP bits in
#: order, then AT_HWCAP2 bits).
HWCAP_NAMES = (
    "fp", "asimd", "evtstrm", "aes", "pmull", "sha1", "sha2", "crc32", "atomics", "fphp", "asimdhp",
    "cpuid", "asimdrdm", "jscvt", "fcma", "lrcpc", "dcpop", "sha3", "sm3", "sm4", "asimddp", "sha512",
    "sve", "asimdfhm", "dit", "uscat", "ilrcpc", "flagm", "ssbs", "sb", "paca", "pacg",
)
HWCAP2_NAMES = (
    "dcpodp", "sve2", "sveaes", "svepmull", "svebitperm", "svesha3", "svesm4", "flagm2", "frint",
    "svei8mm", "svef32mm", "svef64mm", "svebf16", "i8mm", "bf16", "dgh", "rng", "bti", "mte", "ecv",
    "afp", "rpres", "mte3", "sme", "smei16i64", "smef64f64", "smei8i32", "smef16f32", "smeb16f32",
    "smef32f32", "smefa64", "wfxt", "ebf16", "sveebf16", "cssc", "rprfm", "sve2p1", "sme2", "sme2p1",
    "smei16i32", "smebi32i32", "smeb16b16", "smef16f16", "mops", "hbc",
)


def features_from_hwcaps(hwcap: int, hwcap2: int = 0) -> tuple[str, ...]:
    """The /proc/cpuinfo feature names for AT_HWCAP and AT_HWCAP2, in the kernel's
    order. A bit this table does not name is kept as ``hwcap2_bitN``, not dropped:
    the file must not hide a capability the emulator reports."""
    out = []
    for word, names, prefix in ((hwcap, HWCAP_NAMES, "hwcap"), (hwcap2, HWCAP2_NAMES, "hwcap2")):
        for bit in range(64):
            if word >> bit & 1:
                out.append(names[bit] if bit < len(names) else f"{prefix}_bit{bit}")
    return tuple(out)


@dataclass(frozen=True)
class Cache:
    level: int
    type: str  # Data, Instruction or Unified (sysfs's words)
    size_kib: int
    shared: bool = False  # shared by all CPUs (else private to each)
    line: int = 64


@dataclass(frozen=True)
class CpuModel:
    """One CPU to emulate. ``qemu_cpu`` is QEMU's -cpu spec without the MIDR;
    :meth:`qemu_spec` adds it, so that the instruction-visible MIDR_EL1, sysfs and
    /proc/cpuinfo all name the same chip (QEMU's ``max`` otherwise reads as
    implementer 0, part 0x051: no real chip)."""

    name: str
    description: str
    qemu_cpu: str
    midr: int
    caches: tuple[Cache, ...]
    #: AT_HWCAP and AT_HWCAP2 as QEMU 7.2 reports them for this model (measured)
    hwcaps: tuple[int, int]
    bogomips: str = "100.00"

    @property
    def features(self) -> tuple[str, ...]:
        """The /proc/cpuinfo features of :attr:`hwcaps`."""
        return features_from_hwcaps(*self.hwcaps)

    def qemu_spec(self) -> str:
        return f"{self.qemu_cpu},midr={self.midr:#x}"

    # MIDR_EL1 fields (Arm ARM D23.2.122)
    @property
    def implementer(self) -> int:
        return self.midr >> 24 & 0xFF

    @property
    def variant(self) -> int:
        return self.midr >> 20 & 0xF

    @property
    def architecture(self) -> int:
        return self.midr >> 16 & 0xF

    @property
    def part(self) -> int:
        return self.midr >> 4 & 0xFFF

    @property
    def revision(self) -> int:
        return self.midr & 0xF


#: QEMU 7.2's ``max`` with SME off: SVE2 and most of Armv8.x/9.0 (no server chip has all of it)
_MAX = (0xECFFFFFB, 0x77FFF)
_SERVER_CACHES = (Cache(1, "Data", 64), Cache(1, "Instruction", 64), Cache(2, "Unified", 1024),
                  Cache(3, "Unified", 32 * 1024, shared=True))

MODELS: dict[str, CpuModel] = {m.name: m for m in (
    CpuModel("a64fx", "Fujitsu A64FX (SVE 512-bit)", "a64fx", 0x461F0010,
             (Cache(1, "Data", 64, line=256), Cache(1, "Instruction", 64, line=256),
              Cache(2, "Unified", 8 * 1024, shared=True, line=256)),
             (0x415FFB, 0), "200.00"),
    CpuModel("neoverse-n1", "Arm Neoverse-N1 (NEON only, no SVE; AWS Graviton2-class)", "neoverse-n1", 0x413FD0C1,
             _SERVER_CACHES, (0x119FFB, 0), "243.75"),
    CpuModel("sve256", "SVE 256-bit as an Arm Neoverse-V1 (AWS Graviton3-like; QEMU's max CPU without SME, "
             "so with SVE2 that a V1 lacks)", "max,sme=off,sve-default-vector-length=32", 0x411FD400,
             _SERVER_CACHES, _MAX, "2100.00"),
    CpuModel("sve128", "SVE 128-bit as an Arm Neoverse-N2 (NVIDIA Grace-like: Grace's cores are Neoverse-V2, "
             "also SVE2 128-bit; QEMU's max CPU without SME)", "max,sme=off,sve-default-vector-length=16",
             0x410FD490, _SERVER_CACHES, _MAX, "2000.00"),
    CpuModel("cortex-a57", "Arm Cortex-A57 (ARMv8.0-A: NEON, no LSE atomics, no fp16)", "cortex-a57", 0x411FD070,
             (Cache(1, "Data", 32), Cache(1, "Instruction", 48), Cache(2, "Unified", 2048, shared=True)),
             (0x8FB, 0), "250.00"),
)}


def cpu_models() -> dict[str, dict[str, Any]]:
    """Every model as plain data: name, description, QEMU -cpu spec (with the MIDR),
    MIDR, the /proc/cpuinfo features QEMU 7.2 gives it, caches."""
    return {name: {**asdict(m), "features": list(m.features), "qemu_spec": m.qemu_spec(),
                   "midr_hex": f"{m.midr:#010x}"}
            for name, m in MODELS.items()}


def cpu_list(n: int) -> str:
    return "0" if n == 1 else f"0-{n - 1}"


def cpuinfo_text(model: CpuModel, ncpu: int, features: tuple[str, ...] | None = None) -> str:
    """/proc/cpuinfo as an arm64 kernel writes it: one block per CPU with the
    features and the MIDR's fields (cpuinfo and ACL read the part number here)."""
    feats = " ".join(model.features if features is None else features)
    block = (f"BogoMIPS\t: {model.bogomips}\nFeatures\t: {feats}\nCPU implementer\t: {model.implementer:#04x}\n"
             f"CPU architecture: 8\nCPU variant\t: {model.variant:#x}\nCPU part\t: {model.part:#05x}\n"
             f"CPU revision\t: {model.revision}\n\n")
    return "".join(f"processor\t: {i}\n{block}" for i in range(ncpu))


def sysfs_files(model: CpuModel, ncpu: int) -> dict[str, str]:
    """The files of a fake ``/sys`` (paths relative to it) that describe ``ncpu`` CPUs
    of this model: what cpuinfo, oneDNN and xbyak_aarch64 read (MIDR, caches, CPU
    and node lists, topology)."""
    every = cpu_list(ncpu)
    cpu = "devices/system/cpu"
    files = {f"{cpu}/{f}": every + "\n" for f in ("possible", "present", "online")}
    files[f"{cpu}/offline"] = "\n"
    files[f"{cpu}/kernel_max"] = "255\n"
    node = "devices/system/node"
    files.update({f"{node}/possible": "0\n", f"{node}/online": "0\n", f"{node}/has_cpu": "0\n",
                  f"{node}/node0/cpulist": every + "\n"})
    for i in range(ncpu):
        d = f"{cpu}/cpu{i}"
        files[f"{d}/online"] = "1\n"
        files[f"{d}/regs/identification/midr_el1"] = f"0x{model.midr:016x}\n"
        files[f"{d}/regs/identification/revidr_el1"] = f"0x{0:016x}\n"
        for key, value in (("physical_package_id", "0"), ("core_id", str(i)), ("cluster_id", "0"),
                           ("thread_siblings_list", str(i)), ("core_cpus_list", str(i)),
                           ("core_siblings_list", every), ("package_cpus_list", every),
                           ("cluster_cpus_list", every)):
            files[f"{d}/topology/{key}"] = value + "\n"
        for k, c in enumerate(model.caches):
            idx = f"{d}/cache/index{k}"
            ways = 4 if c.level == 1 else 16
            for key, setting in (("level", c.level), ("type", c.type), ("size", f"{c.size_kib}K"),
                                 ("shared_cpu_list", every if c.shared else str(i)),
                                 ("coherency_line_size", c.line), ("ways_of_associativity", ways),
                                 ("number_of_sets", c.size_kib * 1024 // (c.line * ways))):
                files[f"{idx}/{key}"] = f"{setting}\n"
        files[f"{node}/node0/cpu{i}/online"] = "1\n"  # xbyak_aarch64 counts node0/cpuN entries
    return files
