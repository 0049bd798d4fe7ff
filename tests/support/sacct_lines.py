"""sacct ``--parsable2`` lines for tests: a base job whose fields a test replaces."""

from __future__ import annotations

from finops.jobs.slurm import SACCT_FIELDS

BASE_FIELDS = {
    "JobID": "812301",
    "JobIDRaw": "812301",
    "Cluster": "orion",
    "Partition": "gpu-h100",
    "Account": "ml-research",
    "User": "alice",
    "Submit": "2024-03-28T09:14:02",
    "Start": "2024-03-28T09:15:10",
    "End": "2024-03-28T17:42:55",
    "Elapsed": "08:27:45",
    "State": "COMPLETED",
    "AllocTRES": "billing=64,cpu=64,gres/gpu:h100=4,gres/gpu=4,mem=500G,node=1",
    "NodeList": "gpu-h-04",
    "JobName": "llama-ft-7b",
}


def make_line(**fields: str) -> str:
    """BASE_FIELDS with ``fields`` replaced, as one sacct line."""
    values = BASE_FIELDS | fields
    return "|".join(values[name] for name in SACCT_FIELDS)
