"""frameworks.yaml: the real registry loads; malformed entries name entry and field; and a
registry override (DLTRACE_REGISTRY) is data, not code: pip options, other indexes, YAML
bombs and files that are not files are refused in one line before anything runs."""

import re
import time
from pathlib import Path

import pytest

from tests.conftest import dltrace, one_line_error
from tracer import registry
from tracer.data_file import RegistryError
from tracer.registry_entries import ProfileVocab


def test_real_registry():
    fws = registry.load()
    assert set(fws) == {"torch", "tensorflow", "chainer", "mxnet", "jax"}
    assert fws["torch"].install[0].requirements[0] == "torch==2.13.0"  # never a floating torch
    assert fws["torch"].variants["onednn-off"].set == {"torch.backends.mkldnn.enabled": False}
    assert fws["tensorflow"].variants["onednn-off"].env == {"TF_ENABLE_ONEDNN_OPTS": "0"}
    assert fws["tensorflow"].variants["onednn-on"].env == {"TF_ENABLE_ONEDNN_OPTS": "1"}
    assert fws["mxnet"].variants["onednn-off"].env["MXNET_MKLDNN_ENABLED"] == "0"
    assert fws["jax"].variants["nojit"].env == {"JAX_DISABLE_JIT": "1"}
    assert fws["jax"].apis == ("functional",)
    assert fws["chainer"].install[1].options == ("--no-build-isolation",)
    for fw in fws.values():
        assert set(fw.devices) == ({"cpu", "gpu", "standin"} if fw.name in ("torch", "tensorflow", "jax")
                                   else {"cpu", "gpu"})
        assert fw.probe == f"tracer.probes.{fw.name}"


def test_every_framework_declares_what_processing_knows_of_it():
    # the processing stages name no framework: each one's core, utility ops, numbered
    # names and noise come from its own frameworks.yaml entry
    from tracer.knowledge import from_frameworks

    fws = registry.load()
    k = from_frameworks(fws)
    assert k.core_tags == {"torch core", "TensorFlow core", "chainer", "MXNet core", "jaxlib core"}
    for fw in fws.values():
        if fw.name != "chainer":  # pure Python: no native core of its own
            assert fw.knowledge.core_symbols and fw.knowledge.core_libraries, fw.name
        if fw.name in ("torch", "tensorflow", "mxnet", "jax"):
            assert fw.knowledge.utility_ops, fw.name
    assert {f.name for f in fws.values() if f.knowledge.generated} == {"tensorflow", "jax"}
    assert k.is_utility_op("aten::empty") and k.is_utility_op("ReadVariableOp") and not k.is_utility_op("aten::addmm")
    assert k.is_noise("jaxlib.xla_client._xla_gc_callback")
    # a framework's own GPU kernels, tagged by the GPU's vendor (one name for CUDA and HIP)
    assert k.gpu_kernel_tags == {"PyTorch CUDA kernels", "PyTorch HIP kernels"}
    assert k.gpu_kernel_tag("void at::native::vectorized_elementwise_kernel<4>(int)", "AMD") == "PyTorch HIP kernels"
    assert k.gpu_kernel_tag("void at::native::vectorized_elementwise_kernel<4>(int)", "NVIDIA") \
        == "PyTorch CUDA kernels"
    assert not k.gpu_kernel_tag("implicit_convolve_sgemm", "NVIDIA")


def test_profile_vocabulary_is_declared_with_each_framework():
    # the readers name no framework: what each framework's files call things, and the
    # modules that read the formats only a framework can read, are in its entry
    import importlib.util

    fws = registry.load()
    for fw in fws.values():
        for fmt in fw.profiles:
            vocab = fw.profile_vocab.get(fmt, ProfileVocab())
            if fmt in ("xplane", "op-stats"):  # read in the framework's environment, by a probe-side module
                assert vocab.reader.startswith("tracer.probes."), (fw.name, fmt)
                assert importlib.util.find_spec(vocab.reader) is not None, vocab.reader
            if fmt == "op-timeline":
                assert vocab.timeline is not None and vocab.producer, fw.name
    assert fws["torch"].profile_vocab["kineto"].env_header.version == "torch_version"
    assert fws["tensorflow"].profile_vocab["op-stats"].version == "unknown (TensorFlow 2)"


GOOD = """
frameworks:
  fw:
    import: json
    version: "1"
    probe: tracer.probes.fw
    install: [{requirements: [x]}]
    devices: {cpu: cpu}
    source_roots: [json]
    apis: [functional]
"""


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.replace("    import: json\n", ""), "entry 'fw': missing field 'import'"),
        (lambda s: s.replace("devices: {cpu: cpu}", "devices: {tpu: x, cpu: cpu}"),
         "entry 'fw': field 'devices' has unknown device 'tpu'"),
        (lambda s: s.replace("install: [{requirements: [x]}]", "install: [{requirements: []}]"),
         "entry 'fw': field 'install[0].requirements'"),
        (lambda s: s.replace("apis: [functional]", "apis: functional"), "entry 'fw': field 'apis' must be a list"),
        (lambda s: s + "    variants: {fast: {description: x}}\n",
         "entry 'fw': field 'variants.fast' needs 'env' or 'set'"),
        (lambda s: s.replace("source_roots: [json]", "source_roots: []"), "entry 'fw': field 'source_roots'"),
        (lambda s: s + "    variants: {fast: {env: {X: '1'}, default_on: {isa: [avx1024], recorded_as: on}}}\n",
         "field 'variants.fast.default_on.isa' has unknown ISA feature flag 'avx1024'"),
        (lambda s: s + "    variants: {fast: {env: {X: '1'}, default_on: {isa: [avx2], recorded_as: 'a b'}}}\n",
         "field 'variants.fast.default_on.recorded_as' must name a trace meta field"),
        (lambda s: s + "    variants: {fast: {env: {X: '1'}, default_on: {isa: [avx2]}}}\n",
         "missing field 'variants.fast.default_on.recorded_as'"),
        (lambda s: "frameworks: [", "not valid YAML"),
        # wrong types are named, never coerced (a string is not split into characters)
        (lambda s: s.replace("install: [{requirements: [x]}]", "install: [{requirements: [x], options: 5}]"),
         "entry 'fw': field 'install[0].options' must be a list of strings, not int"),
        (lambda s: s.replace("install: [{requirements: [x]}]", "install: [{requirements: torch}]"),
         "entry 'fw': field 'install[0].requirements' must be a non-empty list"),
        (lambda s: s.replace("source_roots: [json]", "source_roots: json"),
         "entry 'fw': field 'source_roots' must be a list"),
        (lambda s: s.replace("apis: [functional]", "apis: [[functional]]"), "field 'apis' must be a list of strings"),
        (lambda s: s.replace("import: json", "import: \"os; os.system('x')\""),
         "field 'import' must be a dotted module name"),
        (lambda s: s.replace("  fw:", "  '[red]fw':"), "framework name '[red]fw' must be a short name"),
        (lambda s: s + "    native: {rate: fast}\n", "field 'native' needs a numeric rate and seconds"),
        (lambda s: s + "    env: [A]\n", "field 'env' must be a dict, not list"),
        (lambda s: s + "    profiles: [nsys]\n", "field 'profiles' has unknown format 'nsys' (choose from: kineto,"),
        (lambda s: s + "    imported: [reference/x.json]\n", "field 'imported' needs 'profiles'"),
        (lambda s: s + "    profiles: [kineto]\n    profile_ops: {xplane: {}}\n",
         "field 'profile_ops.xplane' is not one of its profiles"),
        (lambda s: s + "    profiles: [kineto]\n    profile_ops: {kineto: {conv3d: {forward: [x]}}}\n",
         "field 'profile_ops.kineto.conv3d' is not a primitive"),
        (lambda s: s + "    profiles: [kineto]\n    profile_ops: {kineto: {relu: {backward: [x]}}}\n",
         "field 'profile_ops.kineto.relu' needs forward"),
        (lambda s: s + "    profiles: [kineto]\n    profile_ops: {kineto: {relu: {forward: [x], ranks: [four]}}}\n",
         "field 'profile_ops.kineto.relu.ranks' must be a list of input ranks"),
        (lambda s: s + "    profiles: [kineto]\n    profile_vocab: {xplane: {producer: x}}\n",
         "field 'profile_vocab.xplane' is not one of its profiles"),
        (lambda s: s + "    profiles: [kineto]\n    profile_vocab: {kineto: {producr: x}}\n",
         "field 'profile_vocab.kineto' has unknown field 'producr' (choose from: producer,"),
        (lambda s: s + "    profiles: [xplane]\n    profile_vocab: {xplane: {reader: 'x; y'}}\n",
         "field 'profile_vocab.xplane.reader' must be a dotted module name"),
        (lambda s: s + "    profiles: [kineto]\n    profile_vocab: {kineto: {env_header: {keep: [v]}}}\n",
         "missing field 'profile_vocab.kineto.env_header.key'"),
        (lambda s: s + "    profiles: [op-timeline]\n    profile_vocab: {op-timeline: {timeline: "
                       "{category: op, phases: [B], devices: '(?P<device>x)', backward: y}}}\n",
         "field 'profile_vocab.op-timeline.timeline.phases' must be [B, E]"),
        (lambda s: s + "    profiles: [op-timeline]\n    profile_vocab: {op-timeline: {timeline: "
                       "{category: op, phases: [X], devices: 'gpu', backward: y}}}\n",
         "field 'profile_vocab.op-timeline.timeline.devices' needs a group named 'device'"),
        (lambda s: s + "    knowledge: {gpu_kernels: {names: ['('], tag: t}}\n",
         "field 'knowledge.gpu_kernels.names' is not a valid regular expression"),
        (lambda s: s + "    knowledge: {gpu_kernels: {names: [k]}}\n", "missing field 'knowledge.gpu_kernels.tag'"),
    ],
)
def test_malformed_entries(tmp_path, edit, message):
    p = tmp_path / "frameworks.yaml"
    p.write_text(GOOD)
    assert list(registry.load(p)) == ["fw"]
    p.write_text(edit(GOOD))
    with pytest.raises(RegistryError) as exc:
        registry.load(p)
    assert message in str(exc.value)


def test_messages_name_the_file_given(tmp_path):
    p = tmp_path / "my-registry.yml"
    p.write_text(GOOD.replace("    import: json\n", ""))
    with pytest.raises(RegistryError, match=r"^my-registry.yml: entry 'fw': missing field 'import'$"):
        registry.load(p)


def test_registry_is_read_from_the_package_unless_overridden(tmp_path, monkeypatch):
    from importlib import resources

    import tracer

    monkeypatch.delenv("DLTRACE_REGISTRY", raising=False)
    own = registry.registry_path()
    assert own == resources.files("tracer") / "frameworks.yaml"
    assert Path(str(own)).parent == Path(tracer.__file__).parent  # inside the package, as a wheel holds it
    p = tmp_path / "other.yaml"
    p.write_text(GOOD)
    monkeypatch.setenv("DLTRACE_REGISTRY", str(p))
    assert registry.registry_path() == p and list(registry.load()) == ["fw"]


def test_an_environment_does_not_depend_on_where_its_probe_lives():
    # moving the probes (probes.torch -> tracer.probes.torch) must not make every
    # environment stale: the spec is the install steps and the Python version only
    import dataclasses

    from tracer import envs

    fw = registry.load()["torch"]
    assert envs.spec_hash(dataclasses.replace(fw, probe="elsewhere.torch")) == envs.spec_hash(fw)


def test_parse_shape():
    assert registry.parse_shape("8x64x112x112") == (8, 64, 112, 112)
    with pytest.raises(ValueError):
        registry.parse_shape("8xfoo")


def test_every_primitive_has_a_kernel_shape_of_its_rank():
    # the survey samples native stacks of each primitive at its kernel shape
    from tracer.contract import PRIMITIVES

    for p in PRIMITIVES.values():
        assert len(p.kernel_shape) == p.rank == len(p.shape)


def test_a_survey_plans_each_variant_what_its_question_needs():
    """The default survey (tracer.survey.plan): the transformer family in the default
    variant and the stand-in; a library or compilation switch asks the CNN family; a
    reduced precision every primitive at the first level, no native stacks; the emulated
    CPUs the CNN family; --all-variants and --arm-all everything."""
    from tracer import survey as sv
    from tracer.contract import PRIMITIVES

    fws = registry.load()
    cnn = {p for p in PRIMITIVES if PRIMITIVES[p].family == "cnn"}

    def planned(**kw):
        return {j.folder: j.cases for j in sv.plan(fws.values(), devices=("cpu", "standin"), native=True, arm=True,
                                                   **kw)}

    jobs = planned()
    assert {c.primitive for c in jobs["torch/cpu-default"]} == set(PRIMITIVES)
    assert {c.primitive for c in jobs["torch/standin-default"]} == set(PRIMITIVES)
    for folder in ("torch/cpu-onednn-off", "tensorflow/cpu-onednn-on", "mxnet/cpu-onednn-off", "jax/cpu-nojit"):
        assert {c.primitive for c in jobs[folder]} == cnn, folder
    for folder in ("torch/cpu-bf16", "tensorflow/cpu-bf16", "mxnet/cpu-bf16", "chainer/cpu-fp16", "jax/cpu-bf16"):
        assert sorted((c.primitive, c.api) for c in jobs[folder]) == sorted((p, "functional") for p in PRIMITIVES)
        assert not any("native" in c.layers for c in jobs[folder]), folder
    assert {c.primitive for c in jobs["torch/aarch64-a64fx-default"]} == cnn
    adam = next(c for c in jobs["torch/cpu-default"] if c.primitive == "adam")
    assert adam.resolved_passes() == ("forward",)
    every = planned(all_variants=True, arm_all=True)
    assert every["torch/cpu-bf16"] == every["torch/cpu-onednn-off"] and len(every["torch/cpu-bf16"]) == 45
    assert {c.primitive for c in every["torch/aarch64-a64fx-default"]} == set(PRIMITIVES)


REGISTRY = """
frameworks:
  fw:
    import: json
    version: "1"
    probe: tests.crashprobe
    install: [{requirements: [x]}]
    devices: {cpu: cpu}
    source_roots: [json]
    apis: [functional]
"""


def _registry(tmp_path: Path, text: str) -> dict[str, str]:
    reg = tmp_path / "frameworks.yaml"
    reg.write_text(text)
    return {"DLTRACE_REGISTRY": str(reg), "DLTRACE_HOME": str(tmp_path / "home")}


def test_pip_options_as_requirements_are_refused_before_pip_runs(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    ran = tmp_path / "setup-py-ran"
    (pkg / "setup.py").write_text(f"open({str(ran)!r}, 'w').write('x')\nfrom setuptools import setup\nsetup()\n")
    env = _registry(tmp_path, REGISTRY.replace(
        "requirements: [x]", f'requirements: ["--no-index", "--no-build-isolation", "-e", "{pkg}"]'))
    line = one_line_error(dltrace("env", "setup", "fw", env=env, timeout=120))
    assert "field 'install[0].requirements' item '--no-index' is not a requirement specifier" in line
    assert "--trust-registry" in line and not ran.exists()


@pytest.mark.parametrize("step, where", [
    ('{requirements: ["--index-url=http://127.0.0.1:9/simple", x]}', "install[0].requirements"),
    ('{requirements: [x], options: ["--index-url=http://127.0.0.1:9/simple"]}', "install[0].options"),
    ('{requirements: ["x @ http://127.0.0.1:9/x.whl"]}', "install[0].requirements"),
    ('{requirements: ["./x"]}', "install[0].requirements"),
])
def test_other_indexes_urls_and_paths_are_refused(tmp_path, step, where):
    from tracer import registry

    env = _registry(tmp_path, REGISTRY.replace("{requirements: [x]}", step))
    with pytest.raises(RegistryError, match=f"field '{re.escape(where)}'"):
        registry.load(env["DLTRACE_REGISTRY"])


def test_trust_registry_is_a_flag_the_user_types(tmp_path):
    env = _registry(tmp_path, REGISTRY.replace("{requirements: [x]}",
                                               '{requirements: ["./x"], options: ["--no-index"]}'))
    refused = dltrace("list", env=env, timeout=120)
    assert "is not a requirement specifier" in one_line_error(refused)
    trusted = dltrace("--trust-registry", "list", env=env, timeout=120)
    assert trusted.returncode == 0, trusted.stderr
    assert "fw" in trusted.stdout


@pytest.mark.parametrize("native", ["{rate: .inf}", "{rate: -.inf}", "{rate: .nan}", "{seconds: .nan}",
                                    "{seconds: .inf}", "{rate: 1e400}"])
def test_native_numbers_must_be_finite(tmp_path, native):
    env = _registry(tmp_path, REGISTRY + f"    native: {native}\n")
    line = one_line_error(dltrace("list", env=env, timeout=120))
    assert "field 'native' needs" in line


def test_a_name_with_a_trailing_newline_is_no_name(tmp_path):
    env = _registry(tmp_path, REGISTRY.replace("  fw:", '  "fw\\n":').replace(
        "import: json", 'import: "json\\n"'))
    assert "framework name 'fw\\n' must be a short name" in one_line_error(dltrace("list", env=env, timeout=120))
    env = _registry(tmp_path, REGISTRY.replace("import: json", 'import: "json\\n"'))
    assert "field 'import' must be a dotted module name" in one_line_error(dltrace("list", env=env, timeout=120))


def test_a_registry_that_is_a_fifo_or_a_device_or_huge_is_one_line(tmp_path):
    import os

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    line = one_line_error(dltrace("list", env={"DLTRACE_REGISTRY": str(fifo)}, timeout=60))
    assert "a named pipe, not a file" in line and time.monotonic() - t0 < 30
    line = one_line_error(dltrace("list", env={"DLTRACE_REGISTRY": "/dev/zero"}, timeout=60))
    assert "a character device, not a file" in line
    huge = tmp_path / "huge.yaml"
    huge.write_text(REGISTRY + "#" * (2 << 20) + "\n")
    assert "larger than the 1 MiB allowed" in one_line_error(
        dltrace("list", env={"DLTRACE_REGISTRY": str(huge)}, timeout=60))


BOMB = """\
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
"""


@pytest.mark.parametrize("where", ["    variants: {v: {description: *h, env: {A: '1'}}}\n",
                                   "    variants: {v: {set: {torch.x: *h}}}\n"])
def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path, where):
    bomb = "x-bomb:\n" + "".join(f"  {line}\n" for line in BOMB.splitlines())  # 9**8 strings once expanded
    env = _registry(tmp_path, bomb + REGISTRY + where)
    t0 = time.monotonic()
    line = one_line_error(dltrace("list", env=env, timeout=120))
    assert "more than 100,000 YAML nodes once its aliases are followed" in line
    assert time.monotonic() - t0 < 60


def test_a_recursive_alias_is_refused(tmp_path):
    from tracer import registry

    with pytest.raises(RegistryError, match="YAML nodes once its aliases"):
        registry.load(_registry(tmp_path, "x: &a [*a]\n" + REGISTRY)["DLTRACE_REGISTRY"])
    # a few shared anchors, as a person writes them, still read
    assert "fw" in registry.load(_registry(tmp_path, "x: &a [1, 2]\ny: [*a, *a]\n" + REGISTRY)["DLTRACE_REGISTRY"])
