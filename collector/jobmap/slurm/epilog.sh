#!/bin/sh
# Slurm Epilog (run by slurmd as root after a job ends on the node): this job's GPU mapping files, and only this
# job's (a file another job wrote in the meantime is left alone), become end records. See prolog.sh.
#
# Each file "<name>" of the job is replaced by ".ended.<name>" holding "<job id> <end>", the end in epoch seconds
# (UTC, with nanoseconds): a reading the collector took before this moment and maps after it still gets the job
# (collector/jobmap/mapping_dir.py). One record per GPU name, replaced by the next job's epilog; dot files are
# skipped by dcgm-exporter's --hpc-job-mapping-dir (they name no GPU index).
set -eu

dir="${GPU_JOB_MAPPING_DIR:-/run/gpustat}"
[ -d "$dir" ] || exit 0
end=$(date -u +%s.%N)
for file in "$dir"/*; do
    [ -f "$file" ] || continue
    job=""
    read -r job _rest < "$file" || true
    if [ "$job" = "$SLURM_JOB_ID" ]; then
        name=${file##*/}
        tmp="$dir/.$name.$$"
        printf '%s %s\n' "$job" "$end" > "$tmp"
        mv -f "$tmp" "$dir/.ended.$name"
        rm -f "$file"
    fi
done
