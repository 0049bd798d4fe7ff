#!/bin/sh
# Slurm Prolog (run by slurmd as root before a job starts on the node): record which job holds which GPU.
#
# Writes one file per GPU of the job into the mapping directory (default /run/gpustat, override with
# GPU_JOB_MAPPING_DIR), each holding "<job id> <uid>": named by GPU index (the name dcgm-exporter's
# --hpc-job-mapping-dir and jobstats read) and by UUID (GPU-... or, for a MIG instance, MIG-...), which
# `gpu-finops collector --job-mapping-dir` reads first. Files are replaced atomically.
#
# Slurm sets SLURM_JOB_ID, SLURM_JOB_UID, SLURM_JOB_GPUS (GPU indices, comma-separated) and, with GPUs
# bound by UUID or MIG, CUDA_VISIBLE_DEVICES (UUIDs) in the prolog environment (slurmd gives the prolog a fresh
# environment: set GPU_JOB_MAPPING_DIR in a wrapper, not in slurmd's). Install in slurm.conf:
#   Prolog=/usr/lib/gpu-finops/prolog.sh    Epilog=/usr/lib/gpu-finops/epilog.sh    PrologFlags=Alloc
# PrologFlags=Alloc runs it on every node of a job when the job is allocated (without it, only where a step starts).
set -eu

dir="${GPU_JOB_MAPPING_DIR:-/run/gpustat}"
nvidia_smi="${NVIDIA_SMI:-nvidia-smi}"
[ -n "${SLURM_JOB_GPUS:-}${CUDA_VISIBLE_DEVICES:-}" ] || exit 0
mkdir -p "$dir"

record() {
    tmp="$dir/.$1.$$"
    printf '%s %s\n' "$SLURM_JOB_ID" "${SLURM_JOB_UID:-}" > "$tmp"
    mv -f "$tmp" "$dir/$1"
}

uuids=""
if command -v "$nvidia_smi" >/dev/null 2>&1; then
    uuids=$("$nvidia_smi" --query-gpu=index,uuid --format=csv,noheader 2>/dev/null || true)
fi

old_ifs=$IFS
IFS=,
for index in ${SLURM_JOB_GPUS:-}; do
    record "$index"
    uuid=$(printf '%s\n' "$uuids" | awk -F', *' -v i="$index" '$1 == i { print $2 }')
    if [ -n "$uuid" ]; then record "$uuid"; fi
done
for device in ${CUDA_VISIBLE_DEVICES:-}; do
    case "$device" in
        GPU-*|MIG-*) record "$device" ;;
    esac
done
IFS=$old_ifs
