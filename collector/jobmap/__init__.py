"""Which job holds each GPU on this node: the Slurm prolog's mapping directory, else the GPU's processes' cgroups.

:class:`collector.jobmap.mapper.JobMapper` fills :attr:`collector.contract.sample.Sample.job_id` of GPU samples. The
prolog/epilog that write the mapping directory are shipped in ``collector/jobmap/slurm/`` (:data:`SLURM_SCRIPTS`),
installed with the package: ``gpu-finops slurm-scripts`` prints where.
"""

from pathlib import Path

SLURM_SCRIPTS = {
    "Prolog": Path(__file__).parent / "slurm" / "prolog.sh",
    "Epilog": Path(__file__).parent / "slurm" / "epilog.sh",
}
"""slurm.conf parameter → the shipped script it names, as installed (package data of the wheel, executable)."""
