"""Jobs and who pays for them: Slurm (sacct) and Kubernetes (pods) imports, placing jobs on GPUs, MIG shares,
and the rules that give a job its team."""
