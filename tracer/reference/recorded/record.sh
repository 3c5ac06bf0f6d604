#!/usr/bin/env bash
# Record dltrace's own GPU reference traces (README.md beside this file says what, why and
# how they were made). Run from the repository root on a machine with a CUDA GPU and a
# Python that imports the frameworks (PYTHON, default python3) and dltrace's own
# requirements; the frameworks are used as installed there (`dltrace env use`).
#
#   bash tracer/reference/recorded/record.sh OUT [FRAMEWORK...]     (default: torch jax)
#
# Writes OUT/machine.txt (the card, its driver, the versions) and OUT/survey (the survey:
# traces/FRAMEWORK/{cpu,gpu}-default/*.json and gap records, and its report).
set -uo pipefail
out=${1:?usage: record.sh OUT [FRAMEWORK...]}
shift
[ $# -gt 0 ] || set -- torch jax
py=${PYTHON:-python3}
export DLTRACE_HOME=${DLTRACE_HOME:-$out/home}
# the probe processes share the card: none may take most of its memory up front (JAX does by default)
export XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p "$out"
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    "$py" --version
    "$py" -m pip list --disable-pip-version-check 2>/dev/null | grep -Ei '^(torch|jax|jaxlib|jax-cuda|nvidia-cudnn|nvidia-cublas|cupy|chainer|tensorflow|numpy|py-spy) '
} >"$out/machine.txt" 2>&1
for fw in "$@"; do
    "$py" -m tracer env use "$fw" "$(command -v "$py")" || exit 1
done
"$py" -m tracer survey "$@" --devices cpu,gpu --no-arm --no-imports --no-derive --no-variants --fresh \
    --jobs "${JOBS:-8}" -o "$out/survey"
# The reduced-precision pass (each framework's bf16 variant) of the primitives with GPU
# library kernels for it, on the GPU: traces/FRAMEWORK/gpu-bf16/PRIMITIVE-functional.json,
# one probe process per case, JOBS at a time
bf16=${BF16_PRIMITIVES:-dense conv2d batchnorm layernorm gelu attention embedding crossentropy adam}
bf16_case() {
    "$py" -m tracer probe "$1" "$2" --device gpu --variant bf16 --max-nodes 1 \
        -o "$out/survey/traces/$1/gpu-bf16/$2-functional.json" >/dev/null \
        || echo "record.sh: $1 $2 bf16 on the GPU failed" >&2
}
running=0
for fw in "$@"; do
    mkdir -p "$out/survey/traces/$fw/gpu-bf16"
    for prim in $bf16; do
        bf16_case "$fw" "$prim" &
        running=$((running + 1))
        if [ "$running" -ge "${JOBS:-8}" ]; then wait -n; running=$((running - 1)); fi
    done
done
wait
# JAX's op layer against XLA's own dump of the programs the step ran on the GPU
# (tests/jax_step_programs.py): OUT/jax_step_programs.json, "ran" and "recorded" per case
case " $* " in *" jax "*)
    "$py" tests/jax_step_programs.py "$out/xla-dump" gpu dense conv2d relu sigmoid tanh softmax maxpool2d avgpool2d \
        batchnorm layernorm gelu attention embedding crossentropy adam >"$out/jax_step_programs.json" || echo "record.sh: the JAX step-program check failed" >&2 ;;
esac
