"""libraries.yaml: the vendor-library tables load from the package, drive the tags, and a
malformed file is a one-line error naming the file and the key. Fast tier."""

from __future__ import annotations

import copy
from importlib import resources
from typing import Any, Callable

import pytest
import yaml

from tracer import knowledge, libraries
from tracer.libraries import LibrariesError
from tracer.processing.diff.align import diff_trees
from tracer.processing.tags import library_of
from tracer.data_file import RegistryError
from tracer.trace import Frame, Node

K = knowledge.knowledge()

REAL: dict[str, Any] = yaml.safe_load((resources.files("tracer") / "libraries.yaml").read_text())


def test_the_package_file_loads_and_is_what_the_tags_read():
    lib = libraries.load()
    assert [tag for _, tag in lib.symbol][:2] == ["oneDNN", "MKL"]
    assert knowledge.knowledge().libraries is libraries.default()
    # a row with namespaces matches them qualified only: Eigen:: after a space, not inside a word
    assert library_of(Frame("native", "", "void Eigen::internal::run()"), k=K) == "Eigen"
    assert library_of(Frame("native", "", "MyEigen::run"), k=K) != "Eigen"
    # ignore_case: a MIOpen kernel in any case; the last line of op: AMD's runtime
    assert library_of(Frame("op", "hip", "MIOpenBatchNormFwdTrain"), k=K) == "MIOpen"
    assert library_of(Frame("op", "hip", "__amd_rocclr_fillBuffer"), k=K) == "HIP runtime"
    assert "libc" in lib.system and "oneDNN" in lib.cpu and "CUDA" in lib.other_backends
    assert lib.typed_blas.match("ztrtri_LN_single").group(1) == "z" and not lib.typed_blas.match("gemm_kernel")


def test_knowledge_built_with_other_tables_tags_by_them(tmp_path):
    # the stages read the tables of the Knowledge they are handed, not a global
    doc = copy.deepcopy(REAL)
    doc["tables"]["symbol"].insert(0, {"tag": "MyBLAS", "namespaces": ["myblas"]})
    path = tmp_path / "libraries.yaml"
    path.write_text(yaml.safe_dump(doc))
    mine = knowledge.load(libraries_file=path)
    frame = Frame("native", "", "myblas::sgemm")
    assert library_of(frame, mine) == "MyBLAS" and library_of(frame, k=K) != "MyBLAS"


def _edit(path: list[Any], value: Any = None, *, delete: bool = False) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        node = doc
        for p in path[:-1]:
            node = node[p]
        if delete:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return apply


@pytest.mark.parametrize("edit, message", [
    (_edit(["tables", "symbol", 0, "match", 1], "(?:^|::"),
     "field 'tables.symbol[0].match[1]' is not a valid regular expression (missing ), unterminated subpattern"),
    (_edit(["tables", "op", 3, "tag"], ""), "field 'tables.op[3].tag' must be a non-empty string"),
    (_edit(["tables", "soname", 2, "match"], "^libmkl"), "field 'tables.soname[2].match' must be a non-empty list"),
    (_edit(["tables", "isa", 0, "ignore_case"], "yes"), "field 'tables.isa[0].ignore_case' must be true or false"),
    (_edit(["tables", "module", 0, "matches"], ["x"]),
     "field 'tables.module[0].matches' is not a known key (choose from: tag, match, namespaces, ignore_case)"),
    (_edit(["tables", "module", 1, "match"], delete=True), "field 'tables.module[1]' needs 'match' or 'namespaces'"),
    (_edit(["tables", "symbol", 3, "namespaces"], ["Eigen; x"]),
     "field 'tables.symbol[3].namespaces' has 'Eigen; x', not a C++ namespace"),
    (_edit(["tables", "jit"], delete=True), "field 'tables.jit' is missing"),
    (_edit(["tables", "cuda"], []), "field 'tables.cuda' is not a known key (choose from: symbol, jit,"),
    (_edit(["groups", "gpu"], "cuDNN"), "field 'groups.gpu' must be a non-empty list of strings"),
    (_edit(["incidental", 2], "operator (?:new"), "field 'incidental[2]' is not a valid regular expression"),
    (_edit(["not_kernels"], delete=True), "field 'not_kernels' must be a non-empty list of strings"),
    (_edit(["kernels"], ["x"]), "field 'kernels' is not a known key (choose from: tables, groups,"),
    (_edit(["tables", "python_name", 0, "match"], ["y", "(?i)x"]), "field 'tables.python_name[0].match' is not a "
                                                                    "valid regular expression (global flags not"),
])
def test_a_malformed_file_is_one_line_naming_file_and_key(tmp_path, edit, message):
    doc = copy.deepcopy(REAL)
    edit(doc)
    path = tmp_path / "my-libraries.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(LibrariesError) as exc:
        libraries.load(path)
    text = str(exc.value)
    assert text.startswith("my-libraries.yaml: ") and message in text and "\n" not in text, text
    assert isinstance(exc.value, RegistryError)  # the command line reports it as it reports the registry's


@pytest.mark.parametrize("text, message", [
    ("tables: [", "my-libraries.yaml is not valid YAML"),
    ("- a\n- b\n", "my-libraries.yaml: top level must be a mapping"),
    ("x: &a [*a]\n", "my-libraries.yaml: expands to more than"),
])
def test_a_file_that_is_no_mapping_is_refused(tmp_path, text, message):
    path = tmp_path / "my-libraries.yaml"
    path.write_text(text)
    with pytest.raises(RegistryError, match="^" + message):
        libraries.load(path)


def test_the_diff_classifies_by_the_knowledge_it_is_handed(tmp_path):
    # a library the package's tables do not know, declared in another file: the diff's
    # split names it and calls the split a library choice only with that knowledge
    def n(name: str, *children: Node) -> Node:
        return Node(Frame("native", "", name), 1, 1000, children=list(children))

    a = n("step", n("conv", n("myblas::sgemm")))
    b = n("step", n("conv", n("Eigen::internal::gemm")))
    doc = copy.deepcopy(REAL)
    doc["tables"]["symbol"].insert(0, {"tag": "MyBLAS", "namespaces": ["myblas"]})
    doc["groups"]["vendor"].append("MyBLAS")
    path = tmp_path / "libraries.yaml"
    path.write_text(yaml.safe_dump(doc))
    mine = knowledge.load(libraries_file=path)
    (split,) = diff_trees(a, b, "native", sampled=False, k=mine).splits
    assert split.classification == "library choice" and split.only_a[0].libraries == ["MyBLAS"]
    (split,) = diff_trees(a, b, "native", sampled=False, k=K).splits
    assert split.only_a[0].libraries == []
