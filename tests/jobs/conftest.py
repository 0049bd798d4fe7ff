"""The live Slurm cluster of the job tests (:mod:`tests.support.slurm_cluster`), started once per test run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.slurm_cluster import SlurmCluster, slurm_cluster


@pytest.fixture(scope="session")
def live_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """slurmdbd, slurmctld and four slurmd with eight H100 GRES each, on a MariaDB database of this run's own;
    stopped and dropped when the run ends. Skips (fails under ``CI=true``) without Slurm, munge or MariaDB."""
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster
