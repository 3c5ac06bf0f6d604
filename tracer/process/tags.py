"""Which library a frame belongs to, and which ISA-specific code it is.

This is what a port to a new CPU or accelerator has to replace: the vendor
libraries a primitive reaches (oneDNN, Eigen, BLAS, cuDNN...) and the code written
for one instruction set (AVX-512 kernels, JIT-generated code...).

Tags come from data tables of ``(regex, tag)``, tried in order, first match wins:

1. :data:`SYMBOL_LIBS` on the symbol. It comes first because the frameworks link
   vendor code statically: oneDNN and MKL live inside libtorch_cpu.so, Eigen is
   compiled into TensorFlow's and MXNet's cores, XLA into jaxlib. A symbol in
   ``dnnl::`` is oneDNN whatever shared object holds it.
2. :data:`SONAME_LIBS` on the shared object's basename (``Frame.lib``).
   Each framework's own shared objects are declared with it (tracer.knowledge).
3. The framework namespaces (tracer.knowledge), then :data:`CORE_SYMBOLS`
   (libc/libpython names) on the symbol, for frames whose library is unknown.
4. The library's own basename without its version (an untabled library still
   gets a stable tag), else "".

Op frames (the framework's own dispatch records) are tagged by :data:`OP_LIBS`
on the op or kernel name (aten::mkldnn_convolution, _MklConv2D, cudnn...), and
Python/C frames by :data:`MODULE_LIBS` on their module (cupy, numpy, ideep4py),
then by :data:`PYTHON_NAME_LIBS` on their name (forward_ideep, torch.cuda...).
Pure functions over a Frame; no I/O.
"""

from __future__ import annotations

import re
from functools import lru_cache

from tracer.knowledge import QUALIFIED, knowledge
from tracer.process.normalize import normalize_lib
from tracer.trace import Frame

ONEDNN, MKL, OPENBLAS, BLAS, EIGEN, XLA, MSHADOW = "oneDNN", "MKL", "OpenBLAS", "BLAS", "Eigen", "XLA", "mshadow"
CUDNN, CUBLAS, CUDART, HIP_RUNTIME = "cuDNN", "cuBLAS", "CUDA runtime", "HIP runtime"
NVIDIA, AMD = "NVIDIA", "AMD"
LIBC, LIBSTDCXX, LIBPYTHON, JIT = "libc", "libstdc++", "libpython", "JIT code"


def _t(*rows: tuple[str, str]) -> tuple[tuple[re.Pattern[str], str], ...]:
    return tuple((re.compile(p), tag) for p, tag in rows)


#: Vendor code recognised by its symbol, wherever it is linked.
SYMBOL_LIBS = _t(
    # the frameworks' oneDNN integrations count as oneDNN: mxnet::op::MKLDNNConvolutionForward,
    # tensorflow::MklConvOp, MklEagerOpRewrite (a port replaces them together with the library)
    (r"(?:^|::)MKLDNN[A-Z]\w*|(?:^|::)_?Mkl[A-Z]\w*|" + QUALIFIED + r"(?:dnnl|mkldnn|ideep|zendnn)::|"
     r"(?:^|[^A-Za-z])(?:dnnl|mkldnn)_|brgemm|"
     r"(?:^|[^A-Za-z])jit_(?:uni|sse41|avx|avx2|avx512\w*|brgemm|brdgmm|amx)", ONEDNN),
    (r"(?:^|[^A-Za-z])(?:mkl_|MKL_)|^_?mkl", MKL),
    (r"(?i)openblas|gotoblas|blas_thread_server|(?:^|[^a-z])exec_blas|"
     r"(?:^|[^a-z])[sdcz]gemm_(?:kernel|itcopy|incopy|oncopy|otcopy|beta)", OPENBLAS),
    (QUALIFIED + r"Eigen::", EIGEN),
    (QUALIFIED + r"xla::|__xla_cpu_runtime|(?:^|[^A-Za-z])xla_cpu_", XLA),
    (QUALIFIED + r"mshadow::", MSHADOW),
    (r"(?i)cudnn", CUDNN),
    (r"(?i)cublas", CUBLAS),
    (r"(?i)nccl", "NCCL"),
    (r"(?i)cufft", "cuFFT"),
    (r"(?i)cudart|^cuda[A-Z]\w*|^cu[A-Z][a-z]\w*", CUDART),
    (r"(?i)miopen", "MIOpen"),
    (r"(?i)rocblas|hipblas", "rocBLAS"),
    (QUALIFIED + r"arm_compute::|^arm_compute", "Arm Compute Library"),
    (r"(?:^|[^A-Za-z])kai_", "KleidiAI"),
    (r"(?:^|[^A-Za-z])xnn_|xnnpack", "XNNPACK"),
    (QUALIFIED + r"fbgemm::", "FBGEMM"),
    (r"(?:^|[^A-Za-z])nnp_", "NNPACK"),
    (r"(?i)sleef_", "SLEEF"),
)

#: JIT code named by a perf map, by the generator's naming: oneDNN names each kernel
#: after its generator class (jit_t, jit_brgemm_kernel_t, jit_avx_gemm_f32_xbyak_gemm).
JIT_NAMES = _t(
    (r"^(?:jit_|brg)", ONEDNN),
)

#: Shared objects by basename.
SONAME_LIBS = _t(
    (r"^\[jit\]$", JIT),
    (r"^lib(?:dnnl|mkldnn|zendnn)", ONEDNN),
    (r"^libmkl", MKL),
    (r"^lib(?:iomp|gomp|omp)\b", "OpenMP"),
    (r"^lib(?:scipy_)?openblas", OPENBLAS),
    (r"^lib(?:c?blas|flexiblas|blis)\b", BLAS),
    (r"^libcudnn", CUDNN),
    (r"^libcublas", CUBLAS),
    (r"^libcufft", "cuFFT"),
    (r"^libnccl", "NCCL"),
    (r"^lib(?:cudart|cuda|nvrtc|nvJitLink)\b", CUDART),
    (r"^libarm_compute", "Arm Compute Library"),
    (r"^libxnnpack", "XNNPACK"),
    (r"^_multiarray_umath|^_umath_linalg|^_pocketfft|^lapack_lite", "NumPy"),  # numpy's C core
    (r"^lib(?:c|m|pthread|dl|rt)[.-]|^ld-linux|^\[vdso\]$", LIBC),
    (r"^lib(?:stdc|c)\+\+", LIBSTDCXX),
    (r"^libgcc_s", "libgcc"),
    (r"^libpython|^python3|^_ctypes\.", LIBPYTHON),
    (r"^libffi\.", "libffi"),
)

#: System names, for frames whose library is not known (the frameworks' own namespaces
#: come first, from tracer.knowledge).
CORE_SYMBOLS = _t(
    (r"^_?Py[A-Z_]\w*|^_PyEval", LIBPYTHON),
    (r"^(?:__)?(?:memcpy|memmove|memset|malloc|calloc|realloc|free)(?:_\w+)?$|"
     r"^__libc_|^__GI_|^pthread_|^start_thread$|^clone3?$", LIBC),
    (r"^(?:std::|__gnu_cxx::|__cxxabiv1::)", LIBSTDCXX),
)

#: Op-level records: the op or kernel name says which library computes it.
OP_LIBS = _t(
    (r"(?i)mkldnn|onednn|dnnl|ideep|^_?mkl(?:native)?[A-Z_]|zendnn", ONEDNN),
    (r"(?i)cudnn", CUDNN),
    (r"(?i)cublas|^(?:ampere|volta|turing|hopper|sm\d+)_\w*gemm", CUBLAS),
    (r"(?i)(?:^|[^a-z])mkl(?:[^a-z]|$)", MKL),
    (r"(?i)openblas", OPENBLAS),
    (r"(?i)eigen", EIGEN),
    (r"(?i)xnnpack|^xnn_", "XNNPACK"),
    (r"(?i)(?:^|[^a-z])xla(?:[^a-z]|$)|^(?:fusion|custom-call)$", XLA),
    (r"(?i)mshadow", MSHADOW),
    (r"(?i)memcpy.*(?:htod|dtoh|dtod)|^cuda", CUDART),
    # GPU kernels as GPU profilers name them (imported Kineto and XPlane traces); after
    # the rules above, which keep precedence (an sm80_xmma_fprop_* name is cuBLAS's by
    # the ^sm\d+_...gemm rule before it reaches the cuDNN one below).
    (r"(?i)miopen|(?:^|[^A-Za-z])naive_conv|^igemm_(?:fwd|bwd|wrw)_|gridwise_convolution|^batched_transpose_"
     r"|^transpose_(?:NCHW2CNHW|CNHW2NCHW)|^SubTensorOp|^Op[1-5]dTensor|^OpTensor|^Im[123]d2Col|^Col2Im[123]d"
     r"|^Conv_Winograd_v|^gcnAsm", "MIOpen"),
    (r"^_ZN2ck\d|(?:^|[\s:<(])ck::tensor_operation", "Composable Kernel"),
    (r"(?i)hipblaslt|^Cijk_\w*_UserArgs", "hipBLASLt"),  # TensileLite, hipBLASLt's Tensile, adds _UserArgs
    (r"(?i)rocblas|^Cijk_", "rocBLAS"),  # other Tensile kernels are rocBLAS's (MIOpen's GEMM convolutions too)
    (r"(?:^|[\s:(<])(?:sm\d+_)?xmma_(?:fprop|dgrad|wgrad)|(?:implicit|explicit|precomputed)_convolve_sgemm"
     r"|(?:^|[\s:])(?:wgrad_alg\d_engine|dgrad_engine|dgrad_alg\d|fft2d_(?:r2c|c2r)_)", CUDNN),
    # a CUTLASS GEMM under a matmul is cuBLASLt's choice (its log names the cublasLt call):
    # cuBLAS's, CUTLASS its kernel family; other CUTLASS kernels (flash attention...) are CUTLASS's
    (r"(?i)(?:^|[^a-z])cutlass_\d+_\w*gemm", CUBLAS),
    (r"(?i)(?:^|[^a-z])cutlass(?:::|_)", "CUTLASS"),
    (r"(?:^|[\s:])gemv\w*kernel|(?:^|[\s:])gemmSN_|(?:^|[\s:])gemmk1_kernel", CUBLAS),
    # cuBLASLt's own generated Hopper kernels (the library log names the cublasLt call)
    (r"^nvjet_sm\d+_", CUBLAS),
    (r"(?:^|[\s:])triton_", "Triton"),
    (r"^nccl|[\s:]nccl(?:Dev)?Kernel", "NCCL"),
    (r"^__amd_rocclr_", "HIP runtime"),
)

#: Library calls whose implementation is another library's: oneDNN on Arm runs
#: some primitives through the Arm Compute Library (``gemm:acl``, ``indirect_gemm:acl``).
LIBRARY_IMPLS = _t(
    (r"(?:^|[\s:])acl(?:[\s:)]|$)", "Arm Compute Library"),
)

#: Python and C frames by module.
MODULE_LIBS = _t(
    (r"^cupy(?:x|_backends)?(?:\.|$)", "CuPy"),
    (r"^ideep4py(?:\.|$)", ONEDNN),
    (r"^numpy(?:\.|$)", "NumPy"),
    (r"^scipy(?:\.|$)", "SciPy"),
)

#: Python and C frames by name, when the module does not say: the framework's
#: own wrappers around a vendor library (forward_ideep, torch.backends.cudnn...).
PYTHON_NAME_LIBS = _t(
    (r"(?i)mkldnn|onednn|dnnl|ideep", ONEDNN),
    (r"(?i)cudnn", CUDNN),
    (r"(?i)cublas", CUBLAS),
    (r"(?i)(?:^|[^a-z])cuda(?:[^a-z]|$)", CUDART),
)

#: ISA-specific code, by symbol (lower-cased), most specific first.
ISA_TAGS = _t(
    (r"(?<![a-z])amx", "amx"),
    (r"avx512_core_fp16", "avx512_core_fp16"),
    (r"avx512_core_bf16", "avx512_core_bf16"),
    (r"avx512_(?:core_)?vnni", "avx512_core_vnni"),
    (r"avx512_core", "avx512_core"),
    (r"avx512|(?<![a-z])(?:skylakex|cooperlake|sapphirerapids|skx)(?![a-z])", "avx512"),
    (r"avx2?_vnni", "avx2_vnni"),
    (r"avx2|(?<![a-z])(?:haswell|zen)(?![a-z])", "avx2"),
    (r"(?<![a-z0-9])avx(?![a-z0-9])|(?<![a-z])sandybridge(?![a-z])", "avx"),
    (r"sse4_?2|(?<![a-z])nehalem(?![a-z])", "sse42"),
    (r"sse4_?1|(?<![a-z])penryn(?![a-z])", "sse41"),
    (r"(?<![a-z])sve2?(?:_?(?:128|256|512))?(?![a-z])|(?<![a-z])(?:a64fx|neoversev1)(?![a-z])", "sve"),
    (r"asimd|(?<![a-z])neon(?![a-z])|aarch64|armv8|(?<![a-z])neoversen1(?![a-z])", "neon"),
    (r"::x64::|(?<![a-z0-9])x64(?![a-z0-9])|x86_64", "x64"),
)

#: Groups used by the diff's classification (with the frameworks' own GPU kernels, which
#: tracer.knowledge names: :func:`is_vendor_lib`, :func:`is_gpu_lib`).
_VENDOR_LIBS = frozenset({ONEDNN, MKL, OPENBLAS, BLAS, EIGEN, XLA, MSHADOW, CUDNN, CUBLAS, "cuFFT", "NCCL", "MIOpen",
                          "rocBLAS", "Arm Compute Library", "KleidiAI", "XNNPACK", "FBGEMM", "NNPACK", "SLEEF",
                          "CuPy", "NumPy", "SciPy", "hipBLASLt", "CUTLASS", "Triton", "Composable Kernel"})
_GPU_LIBS = frozenset({CUDNN, CUBLAS, CUDART, "cuFFT", "NCCL", "MIOpen", "rocBLAS", "CuPy", "hipBLASLt", "CUTLASS",
                       "Triton", "Composable Kernel", "HIP runtime"})
#: What every native stack passes through whatever the backend: shown last, muted.
SYSTEM_LIBS = frozenset({LIBC, LIBSTDCXX, LIBPYTHON, "libgcc", "libffi", "OpenMP"})


#: Native frames that run wherever the scheduler, the allocator or the interpreter
#: happens to be: OpenMP's fork/join and barriers (besides libgomp/libiomp frames,
#: tagged OpenMP), malloc and free, reference counts, the GIL, futexes and sleeps,
#: and the C-level trampolines a call passes through (CPython's vectorcall, numpy's
#: __array_function__ dispatcher, pybind11's dispatcher and wrappers: whether a sample shows them,
#: and where, depends on how py-spy merged that process's Python and native stacks;
#: an A/A pair showed pybind11's dispatcher below an Eigen executor in one process). In a sampled stack they say
#: where a thread waited, allocated or passed a call along, never which code was chosen.
INCIDENTAL = re.compile(
    r"^(?:GOMP_\w+|gomp_\w+|__kmp\w*|kmp_\w+|omp_\w+|"
    r"(?:__libc_|_int_|__)?(?:malloc|calloc|realloc|free|cfree|memalign|posix_memalign)|"
    r"operator (?:new|delete)(?:\[\])?|tcmalloc::.*|je_\w+|c10::(?:alloc_cpu|free_cpu)|"
    r"_Py_Dealloc|_?Py_X?(?:Inc|Dec)Ref\w*|PyEval_(?:Restore|Save)Thread|PyGILState_\w+|take_gil|drop_gil|"
    r"sched_yield|(?:__)?futex\w*|pthread_(?:cond|mutex|spin|rwlock)_\w+|__lll_\w+|syscall|"
    r"(?:__)?(?:clock_)?nanosleep|epoll_wait|"
    r"\w*_?vectorcall\w*|_?PyObject_(?:Vectorcall|Call|FastCall)\w*|cfunction_\w+|array_function_\w+|"
    r"array_implement_\w+|pybind11::.*)$")


@lru_cache(maxsize=1 << 16)
def is_incidental(frame: Frame) -> bool:
    """A native frame that says where a thread waited, forked, allocated or passed a
    call along (:data:`INCIDENTAL`, OpenMP's library, a framework's own parallel-for
    wrapper), not what it computed."""
    if frame.kind != "native":
        return False
    bare = _bare(frame.name).strip()
    k = knowledge()
    return (library_of(frame) == "OpenMP" or bool(INCIDENTAL.match(bare))
            or bool(k.incidental and k.incidental.search(bare)))


def is_vendor_lib(lib: str) -> bool:
    """A library a port replaces or links (oneDNN, cuDNN, a framework's own GPU kernels),
    not the framework's core or the system."""
    return lib in _VENDOR_LIBS or lib in knowledge().gpu_kernel_tags


def is_gpu_lib(lib: str) -> bool:
    """GPU code: a GPU library or runtime, or a framework's own GPU kernels."""
    return lib in _GPU_LIBS or lib in knowledge().gpu_kernel_tags


def library_order(lib: str) -> tuple[int, str]:
    """Sort key for lists of libraries: what a port replaces first (vendor and GPU
    libraries, JIT code), then the framework's core, then the rest, system last."""
    rank = (0 if is_vendor_lib(lib) or is_gpu_lib(lib) or lib == JIT else 1 if lib in knowledge().core_tags
            else 3 if lib in SYSTEM_LIBS else 2)
    return rank, lib.lower()


_ADDRESS = re.compile(r"^(?:0x[0-9a-fA-F]+|\?\?|\[unknown\]|)$")
#: Names a native frame of JIT code gets when nothing named it (the collector's, and older traces').
_JIT_NAMES = frozenset({"[jit]", "JIT code", "[JIT code]"})


def _first(table: tuple[tuple[re.Pattern[str], str], ...], text: str) -> str:
    for pattern, tag in table:
        if pattern.search(text):
            return tag
    return ""


def _bare(symbol: str) -> str:
    """A demangled symbol without template arguments and parameter lists, so that
    ``tensorflow::ConvOp<Eigen::ThreadPoolDevice>`` is tagged by its own namespace."""
    out, depth = [], 0
    for ch in symbol:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def is_jit(frame: Frame) -> bool:
    """Native code generated at run time (no symbol, no shared object)."""
    if frame.kind != "native":
        return False
    if frame.lib == "[jit]" or frame.name in _JIT_NAMES:
        return True
    return not frame.lib and bool(_ADDRESS.match(frame.name))


def is_unnamed(frame: Frame) -> bool:
    """A native frame with no symbol: a bare address, or JIT code no perf map named."""
    return frame.name in _JIT_NAMES or bool(_ADDRESS.match(frame.name))


@lru_cache(maxsize=1 << 16)  # pure; a trace has a few thousand distinct frames, seen many times
def library_of(frame: Frame) -> str:
    """The library tag of a frame ("oneDNN", "Eigen", "cuDNN", "torch core"...), "" if unknown."""
    kind = frame.kind
    if kind == "native":
        if is_jit(frame):  # named by a perf map (jit_avx2_conv_fwd_kernel_f32_t: oneDNN's), else unknown
            return (not is_unnamed(frame) and (_first(SYMBOL_LIBS, frame.name) or _first(JIT_NAMES, frame.name))) or JIT
        bare = _bare(frame.name)
        lib = frame.lib.rsplit("/", 1)[-1]
        k = knowledge()
        return (_first(SYMBOL_LIBS, bare) or (lib and (_first(SONAME_LIBS, lib) or _first(k.core_libraries, lib)))
                or _first(k.core_symbols, bare) or _first(CORE_SYMBOLS, bare) or (normalize_lib(lib) if lib else ""))
    if kind == "op":
        # the op layer's own record of who computes it: a library tag in lib, or XLA's HLO ops
        return (_first(OP_LIBS, frame.name) or (_first(SONAME_LIBS, frame.lib) if frame.lib else "")
                or (frame.lib if is_vendor_lib(frame.lib) else "") or (XLA if frame.module == "xla" else ""))
    if kind == "library":  # the reporting library, or the one its implementation delegates to
        return _first(LIBRARY_IMPLS, frame.name) or frame.lib
    if kind in ("python", "c"):
        return (_first(MODULE_LIBS, frame.module) or _first(knowledge().core_modules, frame.module)
                or _first(PYTHON_NAME_LIBS, f"{frame.module}.{frame.name}"))
    return ""


def library_call_kind(frame: Frame) -> str:
    """What a library call computes (``convolution``, ``reorder``, ``SGEMM``): the
    first word of a "library" frame's name; "" for other frames."""
    return frame.name.split(" ", 1)[0] if frame.kind == "library" else ""


@lru_cache(maxsize=1 << 16)
def vendor_named(frame: Frame) -> str:
    """The vendor library a native frame's full symbol names anywhere, template
    arguments included (``std::_Function_handler<..., dnnl::impl::...::execute>``
    is oneDNN's lambda even though the frame itself is libstdc++'s)."""
    return _first(SYMBOL_LIBS, frame.name) if frame.kind == "native" else ""


@lru_cache(maxsize=1 << 16)
def isa_of(frame: Frame) -> str:
    """The ISA a native or op frame's code is written for ("avx2", "avx512_core", "neon",
    "jit" for run-time generated code...), "" if the name does not say."""
    if frame.kind not in ("native", "op", "library"):
        return ""
    if is_jit(frame):
        return (not is_unnamed(frame) and _first(ISA_TAGS, frame.name.lower())) or "jit"
    return _first(ISA_TAGS, frame.name.lower())


def module_of(vendor: str) -> str:
    """The frame module of a GPU kernel: "cuda" on NVIDIA, "hip" on AMD."""
    return "hip" if vendor == AMD else "cuda" if vendor == NVIDIA else "gpu"


def kernel_lib(name: str, vendor: str, kind: str = "kernel") -> str:
    """The library tag of a GPU activity (a kernel, memcpy or memset): the op table's,
    else the framework's own kernels' (knowledge ``gpu_kernels``). One rule for the
    importers, which tag the kernels of a profile, and for the kernels dltrace's probe
    recorded on a GPU machine, untagged (tracer.process.gpu_cells)."""
    if kind != "kernel":
        return HIP_RUNTIME if vendor == AMD else CUDART
    return library_of(Frame("op", module_of(vendor), name)) or knowledge().gpu_kernel_tag(name, vendor)


#: The frame module a GPU kernel dltrace's probe recorded is kept under, and its vendor.
KERNEL_MODULES = {module_of(v): v for v in (NVIDIA, AMD)}
_COPIES = re.compile(r"^(?:Memset|Memcpy)\b")


def recorded_kernel_lib(f: Frame) -> str:
    """The tag the importer would give a GPU activity dltrace's probe recorded on a GPU
    machine (module "cuda" or "hip", untagged: the probe runs with the standard library
    alone); "" for any other frame, or one no table knows."""
    vendor = KERNEL_MODULES.get(f.module)
    if f.lib or vendor is None:
        return ""
    return kernel_lib(f.name, vendor, "memcpy" if _COPIES.match(f.name) else "kernel")
