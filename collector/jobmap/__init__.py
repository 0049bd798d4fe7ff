"""Which job holds each GPU on this node: the Slurm prolog's mapping directory, else the GPU's processes' cgroups.

:class:`collector.jobmap.mapper.JobMapper` fills :attr:`collector.contract.sample.Sample.job_id` of GPU samples. The
prolog/epilog that write the mapping directory are shipped in ``collector/jobmap/slurm/``.
"""
