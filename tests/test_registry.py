"""frameworks.yaml: the real registry loads; malformed entries name entry and field."""

from pathlib import Path

import pytest

from tracer import registry
from tracer.registry import RegistryError


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
        assert set(fw.devices) == ({"cpu", "gpu", "standin"} if fw.name == "torch" else {"cpu", "gpu"})
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
