#!/bin/sh
# Slurm Epilog (run by slurmd as root after a job ends on the node): remove this job's GPU mapping files,
# and only this job's (a file another job wrote in the meantime is left alone). See prolog.sh.
set -eu

dir="${GPU_JOB_MAPPING_DIR:-/run/gpustat}"
[ -d "$dir" ] || exit 0
for file in "$dir"/*; do
    [ -f "$file" ] || continue
    job=""
    read -r job _rest < "$file" || true
    if [ "$job" = "$SLURM_JOB_ID" ]; then rm -f "$file"; fi
done
