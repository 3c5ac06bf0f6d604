"""The kernel a CPU cell names is one that computed, and its op is the op it ran under
(tracer/processing/cpu_kernel.py): the rule on small trees where the most sampled leaf is
a helper, and on every framework's surveyed traces."""

from __future__ import annotations

import pytest

from tracer.contract import PRIMITIVES
from tracer.knowledge import knowledge
from tracer.processing.cpu_kernel import COMPILED, LIBRARY_REPORT, SAMPLED, computes, named_kernel
from tracer.analysis.gpu_cells import gpu_cells
from tracer.survey import read_folders
from tracer.trace import Frame, Node, Run, Trace

K = knowledge()
#: Helpers earlier surveys named as kernels (the most sampled leaf of a pass that is mostly overhead).
HELPERS = ("StackTrace::Capture", "GetOp", "AttrBuilder", "FunctionLibraryRuntime", "RunMultiDeviceSync",
           "AttrValue", "map_dtype_to_tensor", "tp_dealloc", "nonstructured_to_structured", "DispatchStubImpl",
           "sswap_k", "ismax_k", "isamin_k", "GetCPUAllocator", "EagerTensor", "Hash64", "SetDim", "TensorBlockIO",
           "array_variance", "npyiter_", "convert_to_long", "_aligned_", "python_builtins")


def native(*stacks: tuple[int, list[str]]) -> Node:
    """A native layer of ``stacks``: (samples, frame names from the outermost down)."""
    root = Node(Frame("root", "", "native"))
    for count, names in stacks:
        node = root
        for name in names:
            kind = "python" if name.endswith(".forward") else "native"
            child = next((c for c in node.children if c.frame.name == name), None)
            if child is None:
                child = Node(Frame(kind, "", name))
                node.children.append(child)
            child.count += count
            node = child
    return root


def trace_of(pass_: str, **layers: Node) -> Trace:
    return Trace({"framework": "tensorflow", "primitive": "relu", "device": "cpu"}, [Run(pass_, "warm", dict(layers))])


RELU = "tensorflow::UnaryElementWiseOp<float, tensorflow::ReluOp<Eigen::ThreadPoolDevice, float> >::Compute"
EVAL = ("Eigen::internal::EvalRange<Eigen::TensorEvaluator<Eigen::TensorAssignOp<Eigen::TensorMap<Eigen::Tensor<float, "
        "1, 1, long>, 16, Eigen::MakePointer>, Eigen::TensorCwiseUnaryOp<Eigen::internal::scalar_max_op<float>>>>, "
        "long, true>::run(Eigen::TensorEvaluator*, long, long)")


def test_the_most_sampled_leaf_is_no_kernel_when_it_is_a_helper():
    layer = native((50, ["TFE_Py_FastPathExecute_C", "tensorflow::StackTrace::Capture"]),
                   (30, ["tensorflow::EagerOperation::Execute", "tensorflow::AttrBuilder::NumInputs"]),
                   (10, [RELU, EVAL, "malloc"]),  # a helper below the kernel counts for the kernel
                   (5, [RELU, EVAL]))
    got = named_kernel([trace_of("forward", native=layer)], "forward", ["Relu", "Mul"], K)
    assert (got.kernel, got.evidence, got.library, got.op) == (EVAL, SAMPLED, "Eigen", "Relu")


def test_a_pass_whose_samples_reach_no_computing_frame_names_none_and_says_why():
    layer = native((50, ["TFE_Py_FastPathExecute_C", "tensorflow::StackTrace::Capture"]),
                   (9, ["pybind11::cpp_function::dispatcher", "PjitFunction_tp_dealloc"]),
                   (7, ["PyArray_Something", "nonstructured_to_structured_resolve_descriptors"]))
    got = named_kernel([trace_of("forward", native=layer)], "forward", ["Relu"], K)
    assert got.kernel == "" and got.evidence == "" and "no sampled stack reached code that computes" in got.why_none


def test_a_library_call_is_named_under_the_op_that_made_it():
    library = Node(Frame("root", "", "library"), children=[Node(Frame("library", "oneDNN", "gemm_api"), 2)])
    got = named_kernel([trace_of("backward", library=library)], "backward", ["BiasAddGrad", "MatMul"], K)
    assert (got.kernel, got.op, got.evidence) == ("gemm_api", "MatMul", LIBRARY_REPORT)
    conv = Node(Frame("root", "", "library"), children=[
        Node(Frame("library", "oneDNN", "reorder jit:uni"), 1),  # a layout reorder is not the kernel
        Node(Frame("library", "oneDNN", "convolution brg_conv_bwd:avx512_core (backward_data)"), 1)])
    got = named_kernel([trace_of("backward", library=conv)], "backward", ["BiasAddGrad", "Conv2DBackpropInput"], K)
    assert got.kernel.startswith("convolution brg_conv_bwd") and got.op == "Conv2DBackpropInput"


def test_a_compiled_program_names_the_instruction_doing_the_primitives_work():
    def op(name: str, module: str = "jax", *kids: Node) -> Node:
        return Node(Frame("op", module, name), 1, children=list(kids))

    fusion = op("fusion(kLoop)", "xla", *(op(n, "xla") for n in ("broadcast", "compare", "add", "select", "gather")))
    layer = op("root", "", op("jit:_take", "jax", op("lt"), op("add"), op("select_n"), op("gather")),
               op("XLA:cpu", "xla", fusion, op("bitcast", "xla")))
    got = named_kernel([trace_of("forward", op=layer)], "forward", ["lt", "add", "select_n", "gather"], K)
    assert got.evidence == COMPILED and got.kernel.startswith("fusion(kLoop): gather, compare")
    assert got.op.startswith("gather + lt")


@pytest.fixture(scope="module")
def cells(survey_root) -> dict[str, list]:
    out = {}
    for fw in ("torch", "tensorflow", "jax", "mxnet", "chainer"):
        traces, _, _ = read_folders([survey_root / "traces" / fw])
        out[fw] = (gpu_cells(traces, K), traces)
    return out


def _native_frames(traces: list[Trace], primitive: str, pass_: str) -> dict[str, Frame]:
    out = {}
    for t in traces:
        if t.info.primitive != primitive or t.info.device != "cpu":
            continue
        tree = t.layer(pass_, "native")
        for _, n in tree.walk() if tree is not None else ():
            out.setdefault(n.frame.name, n.frame)
    return out


@pytest.mark.frameworks
@pytest.mark.parametrize("framework", ["torch", "tensorflow", "jax", "mxnet", "chainer"])
def test_no_cell_names_a_helper(cells, framework):
    """Every CPU cell of the surveyed traces names a kernel a library reported, one the
    compiled program ran, or a sampled frame the rule says computes; never a helper."""
    found, traces = cells[framework]
    assert [(c.primitive, c.pass_) for c in found] == [(p, q) for p in PRIMITIVES for q in PRIMITIVES[p].passes]
    named = 0
    for c in found:
        if c.cpu is None:
            continue
        if not c.cpu.kernel:
            assert c.cpu.why_none, (c.primitive, c.pass_)  # a cell naming none says why
            continue
        named += 1
        assert not any(h in c.cpu.kernel for h in HELPERS), (c.primitive, c.pass_, c.cpu.kernel)
        assert c.cpu.evidence in (LIBRARY_REPORT, COMPILED, SAMPLED)
        if c.cpu.evidence == SAMPLED:
            frame = _native_frames(traces, c.primitive, c.pass_).get(c.cpu.kernel)
            assert frame is not None and computes(frame, K), (c.primitive, c.pass_, c.cpu.kernel)
    # Chainer's kernels are NumPy's, which no library reports: the session survey samples
    # its native stacks only at conv2d's small default shape, where none computes visibly
    assert named or framework == "chainer", f"{framework}: no cell names a kernel"


@pytest.mark.frameworks
def test_jax_cells_name_xla_cpu_kernels_and_ops_that_ran_them(cells):
    found, _ = cells["jax"]
    xla = [c for c in found if c.cpu and c.cpu.evidence in (COMPILED, LIBRARY_REPORT)]
    assert len(xla) >= 25, [(c.primitive, c.pass_, c.cpu.why_none if c.cpu else "") for c in found]
    by = {(c.primitive, c.pass_): c.cpu for c in found}
    assert by[("dense", "backward")].op == "dot_general"  # the product, not the bias gradient's reduce_sum
    assert "reduce-window" in by[("maxpool2d", "forward")].kernel


@pytest.mark.frameworks
def test_a_library_call_stands_beside_the_op_that_made_it(cells):
    tf = {(c.primitive, c.pass_): c.cpu for c in cells["tensorflow"][0]}
    assert tf[("dense", "backward")].kernel == "gemm_api" and tf[("dense", "backward")].op == "MatMul"
    mx = {(c.primitive, c.pass_): c.cpu for c in cells["mxnet"][0]}
    assert "pool" in mx[("maxpool2d", "backward")].op.lower()
    assert mx[("attention", "forward")].op == "softmax" or "softmax" not in mx[("attention", "forward")].kernel


def test_the_rules_are_data_beside_the_library_knowledge():
    """What counts as computing is declared (libraries.yaml computes, frameworks.yaml
    knowledge.computes), so a framework's or library's kernel is added there."""
    assert K.libraries.computes.search("FLOAT_multiply_FMA3__AVX2")
    assert K.computes is not None and K.computes.search("at::native::cpu_max_pool")
    assert not computes(Frame("native", "", "at::native::DispatchStubImpl::try_choose_cpu_impl"), K)
    assert not computes(Frame("native", "", "sswap_k_COOPERLAKE"), K)
