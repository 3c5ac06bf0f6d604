"""What a user supplies never becomes code in a generated skeleton (tracer.scaffold:
its writers for torch, JAX and TensorFlow): a command line or folder holding quotes, a triple quote, a
newline and C++ is written into kernels.py's docstrings and the C++ files' comments
escaped, so that the Python still compiles to the same module and no line of C++ is
added. Fast tier: the templates are rendered without a framework."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tracer import scaffold as sc

HOSTILE = ('dltrace scaffold torch -o \'x"""+str(__import__("os").system("touch /tmp/pwned"))+"""\' --check\n'
           '__attribute__((constructor)) static void own() { system("id"); }\n\\N{BAD} \u202e\'\'\'')


def test_code_text_ends_no_comment_string_or_docstring():
    text = sc.code_text(HOSTILE)
    assert "\n" not in text and '"""' not in text and "'''" not in text and text.isascii()
    # in a docstring it is the user's text again, as text
    assert ast.literal_eval('"""' + text + '"""') == HOSTILE


def test_a_torch_skeleton_written_from_a_hostile_command_compiles_to_the_same_module(tmp_path):
    ks = [sc.Kernel("aten::relu", ("forward",), "relu"), sc.Kernel("aten::random_.from", ("setup",), "random__from")]
    ctx = {"name": "mydevice", "what": "net's training step (your workload's own level)", "kernels": ks, "ops": ks,
           "tool_version": "0", "command": sc.code_text(HOSTILE), "torch_version": "2.13.0",
           "folder": sc.code_text(HOSTILE), "steps": 2, "models": True, "random": True,
           "cases": [{"label": "net (user)", "setup": "1 ops", "forward": "1 ops", "backward": "0 ops"}]}
    env = sc.template_env()
    for template in ("kernels.py.j2", "__init__.py.j2", "check.py.j2"):
        source = env.get_template(template).render(ctx)
        tree = ast.parse(source)  # it compiles
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "str"]
        assert not calls, template  # the payload's str(__import__(...)) is no code
        assert "touch /tmp/pwned" not in "".join(ast.unparse(n) for n in tree.body if not isinstance(n, ast.Expr))
    kernels = env.get_template("kernels.py.j2").render(ctx)
    assert 'getattr(torch.ops.aten.random_, \'from\')' in kernels  # an overload named by a keyword


def test_a_jax_skeleton_written_from_a_hostile_command_compiles_to_the_same_module():
    ks = [sc.Kernel("stablehlo.and", ("forward",), "and_"), sc.Kernel("chlo.erf", ("backward",), "chlo_erf")]
    ctx = {"name": "mydevice", "what": "net's training step (your workload's own level)", "kernels": ks, "ops": ks,
           "tool_version": "0", "command": sc.code_text(HOSTILE), "jax_version": sc.code_text(HOSTILE),
           "folder": sc.code_text(HOSTILE), "steps": 2, "models": True,
           "cases": [{"label": "net (user)", "forward": "1 ops", "backward": "1 ops"}]}
    env = sc.template_env()
    for template in ("jax_ops.py.j2", "jax_init.py.j2", "jax_check.py.j2"):
        tree = ast.parse(env.get_template(template).render(ctx))  # it compiles
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "str"]
    ops = ast.parse(env.get_template("jax_ops.py.j2").render(ctx))
    assert [n.name for n in ops.body if isinstance(n, ast.FunctionDef)] == ["and_", "chlo_erf"]
    readme = env.get_template("jax_README.md.j2").render(ctx)
    assert "\n__attribute__" not in readme and "\\n__attribute__" in readme  # said, escaped, on one line


def test_a_jax_op_name_that_is_no_stablehlo_name_is_refused():
    from tracer.scaffold import jax as scaffold_jax

    assert scaffold_jax.STABLEHLO_OP.fullmatch("stablehlo.dot_general")
    for bad in ('stablehlo.add"); import os; ("', "stablehlo.add\n", "Stablehlo.add", "add"):
        assert not scaffold_jax.STABLEHLO_OP.fullmatch(bad), bad


def test_the_tensorflow_skeleton_takes_no_line_from_the_command():
    ks = [sc.Kernel("MatMul", ("forward",), "MatMul_kernel"), sc.Kernel("Cast", ("setup",), "Cast_kernel")]
    ctx = {"name": "mydevice", "device_type": "MYDEVICE", "what": "net's training step (your workload's own level)",
           "kernels": ks, "ops": ks, "tool_version": "0", "command": sc.code_text(HOSTILE),
           "tf_version": sc.code_text(HOSTILE), "folder": sc.code_text(HOSTILE), "steps": 2, "models": True,
           "registrations": [{"op": "MatMul", "function": "MatMul_kernel", "attr": "T", "type": 1},
                             {"op": "Cast", "function": "Cast_kernel", "attr": "", "type": 0}],
           "cases": [{"label": "net (user)", "setup": "1 ops", "forward": "1 ops", "backward": "0 ops"}], "host": {}}
    env = sc.template_env()
    text = env.get_template("tensorflow_kernels.cc.j2").render(ctx)
    assert not [line for line in text.splitlines() if "__attribute__" in line and not line.lstrip().startswith("//")]
    assert '{"MatMul", MatMul_kernel, "T", static_cast<TF_DataType>(1)},' in text
    assert '{"Cast", Cast_kernel, nullptr, static_cast<TF_DataType>(0)},' in text
    readme = env.get_template("tensorflow_README.md.j2").render(ctx)
    assert "\n__attribute__" not in readme
    ast.parse(env.get_template("tensorflow_check.py.j2").render(ctx))


def test_a_tensorflow_name_that_is_no_identifier_is_refused():
    from tracer.scaffold import tensorflow as scaffold_tensorflow

    assert scaffold_tensorflow.TF_NAME.fullmatch("Conv2DBackpropFilter")
    for bad in ('MatMul"); system("id', "MatMul\n", "_Arg", "9op"):
        assert not scaffold_tensorflow.TF_NAME.fullmatch(bad), bad


def test_force_writes_only_over_a_skeleton_and_never_through_links(tmp_path):
    from tracer.files import OutputError, own_folder

    with pytest.raises(OutputError, match="holds no skeleton dltrace wrote"):
        sc.prepare(Path("/"), force=True)  # `scaffold -o / --force` wrote five entries into the root
    other = tmp_path / "theirs"
    other.mkdir()
    (other / "kernels.py").write_text("their kernels\n")
    link = tmp_path / "link"
    link.symlink_to(other, target_is_directory=True)
    with pytest.raises(OutputError, match="it is a link"):
        sc.prepare(link, force=True)
    folder = tmp_path / "skeleton"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    with pytest.raises(OutputError, match="is not empty"):
        sc.prepare(folder, force=False)
    with pytest.raises(OutputError, match="no scaffold.json"):
        sc.prepare(folder, force=True)
    (folder / sc.MANIFEST).write_text("{}")
    assert sc.prepare(folder, force=True) == folder
    # a skeleton whose package folder and files are links to elsewhere: replaced, never followed
    (folder / "mydevice").symlink_to(other, target_is_directory=True)
    pkg = own_folder(folder / "mydevice")
    assert pkg.is_dir() and not pkg.is_symlink() and (other / "kernels.py").read_text() == "their kernels\n"
    (folder / "README.md").symlink_to(other / "kernels.py")
    from tracer.files import write_text

    write_text(folder / "README.md", "the skeleton's\n")
    assert not (folder / "README.md").is_symlink() and (other / "kernels.py").read_text() == "their kernels\n"


@pytest.mark.parametrize("op", ['aten::x"); import os; os.system("id")  #', "aten::relu\n__import__('os')",
                                "aten::\u202erelu", "aten::\u0663relu", "aten::relu.out'"])
def test_an_op_name_that_cannot_be_code_is_refused(op):
    from tracer.errors import DltraceError
    from tracer.analysis.standin_needs import StandinNeeds

    needs = StandinNeeds("standin", "run", "torch", by_pass={"forward": ["aten::relu", op]})
    with pytest.raises(DltraceError, match="cannot be written into a skeleton"):
        sc.WRITERS["torch"].kernels(needs)


@pytest.mark.parametrize("framework, op", [("tensorflow", 'MatMul"); system("id'), ("tensorflow", "Mat\nMul"),
                                           ("jax", "stablehlo.dot general"), ("jax", 'stablehlo.add"); import os')])
def test_a_tensorflow_or_jax_op_name_that_cannot_be_code_is_refused(framework, op):
    from tracer.errors import DltraceError
    from tracer.analysis.standin_needs import StandinNeeds

    fine = "MatMul" if framework == "tensorflow" else "stablehlo.add"
    needs = StandinNeeds("standin", "run", framework, by_pass={"forward": [fine, op]})
    with pytest.raises(DltraceError, match="cannot be written into a skeleton"):
        sc.WRITERS[framework].kernels(needs)


@pytest.mark.parametrize("name", ["os", "json", "typing", "numpy", "torch", "check"])
def test_a_backend_name_that_shadows_a_module_is_refused(name):
    from tracer.errors import UsageError

    with pytest.raises(UsageError, match="is taken"):
        sc.check_name(name)


def test_a_tensorflow_device_name_with_a_digit_is_refused():
    """TensorFlow takes a PluggableDevice's type as [A-Z][A-Z_]* (the name upper-cased)."""
    from tracer.errors import UsageError

    assert sc.check_name("my_device", "tensorflow") == "my_device"
    assert sc.check_name("dev2", "torch") == "dev2"
    with pytest.raises(UsageError, match="no digits"):
        sc.check_name("dev2", "tensorflow")


def test_a_torch_version_that_carries_code_stays_text_in_kernels_py(tmp_path, monkeypatch):
    """The framework's version comes from the trace, which a workload can change: in
    torch's kernels.py it is escaped as TensorFlow's and JAX's skeletons escape it."""
    from dataclasses import replace
    from types import SimpleNamespace

    from tracer.runner import CaseSpec
    from tracer.scaffold import skeleton

    ks = [sc.Kernel("aten::relu", ("forward",), "relu")]
    monkeypatch.setattr(skeleton, "needs_of", lambda traces: SimpleNamespace(evidence="run"))
    monkeypatch.setattr(skeleton, "case_rows", lambda specs, traces: [])
    trace = SimpleNamespace(info=SimpleNamespace(framework_version=HOSTILE))
    writer = replace(sc.WRITERS["torch"], kernels=lambda needs: ks)
    writer.write(tmp_path, "mydevice", [CaseSpec("relu")], [trace], "dltrace scaffold torch")
    tree = ast.parse((tmp_path / "mydevice" / "kernels.py").read_text())  # it compiles
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "str"]
    assert HOSTILE in ast.get_docstring(tree, clean=False)  # said as text


def test_scaffold_json_names_no_folder_of_this_machine_and_the_check_finds_the_workload(tmp_path):
    from tracer.contract import USER_API, UserWorkload
    from tracer.probes.skeleton_check import read_manifest
    from tracer.runner import CaseSpec

    mine = [tmp_path / "home" / d / "net.py" for d in ("a", "b")]
    for i, f in enumerate(mine):
        f.parent.mkdir(parents=True)
        f.write_text(f"# {i}\n")
    specs = [CaseSpec("relu"), *(CaseSpec(f"net{i}", USER_API, user=UserWorkload(f"net{i}", str(f)))
                                 for i, f in enumerate(mine))]
    out = tmp_path / "skeleton"
    out.mkdir()
    sc.write_manifest(out, "torch", "2.13", "mydevice", "what", specs, [], "run", "dltrace scaffold")
    text = (out / sc.MANIFEST).read_text()
    assert str(tmp_path) not in text  # no folder of this machine
    _, read = read_manifest(out)
    files = [Path(s.user["file"]) for s in read if s.user]
    assert files == [f.resolve() for f in mine]  # each file where it is, beside what it imports


def test_every_writer_in_the_table_names_templates_and_sources_that_exist():
    """The table is the one place a framework's skeleton is named: each row's templates
    render from templates/scaffold/, its copied stand-in is in the package, and the
    frameworks it holds are the ones the command line takes."""
    env = sc.template_env()
    assert set(sc.WRITERS) == {"torch", "tensorflow", "jax"}
    for framework, writer in sc.WRITERS.items():
        assert writer.framework == framework
        for template in [t for _, t in writer.rendered] + [writer.check_template, writer.readme_template]:
            env.get_template(template)  # raises when it is missing
        assert all(source.is_file() for _, source in writer.copied), framework
        assert "{name}" in writer.summary and "{n}" in writer.summary


def test_a_framework_with_no_writer_is_named_not_written():
    from tracer.errors import UsageError

    assert sc.check_framework("jax") is sc.WRITERS["jax"]
    with pytest.raises(UsageError, match="MXLoadLib.*torch's, TensorFlow's and JAX's backends only"):
        sc.check_framework("mxnet")
