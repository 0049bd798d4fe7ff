"""NFS (mountstats) and Lustre (llite stats, job_stats) sources on the real fixtures and hand-made edge cases."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from collector.contract import metric_names as m
from collector.contract.sample import Sample
from collector.sources.lustre import LustreSource
from collector.sources.nfs import NfsSource

NODE = Path(__file__).parents[1] / "fixtures" / "node"


def _by(samples: list[Sample], entity: str, *labels: str) -> dict[tuple[str, ...], dict[str, float]]:
    return {tuple(s.labels[n] for n in labels): s.values for s in samples if s.entity == entity}


def test_nfs_v4_procfs_fixture(shared_data: Path) -> None:
    samples = NfsSource(shared_data / "procfs-fixtures/proc/26231/mountstats").collect()
    mounts = _by(samples, "nfs_mount", "mountpoint", "export", "fstype")
    # bytes: 1207640230 0 0 0 1210214218 0 295483 0 -> read = normal 1207640230 + direct 0
    assert mounts == {("/mnt/nfs/test", "192.168.1.1:/srv/test", "nfs4"):
                      {m.NFS_READ_BYTES: 1207640230, m.NFS_WRITTEN_BYTES: 0}}  # fmt: skip
    operations = _by(samples, "nfs_operation", "mountpoint", "operation")
    assert operations["/mnt/nfs/test", "READ"] == {m.NFS_OPERATIONS: 1298}
    assert operations["/mnt/nfs/test", "WRITE"] == {m.NFS_OPERATIONS: 0}


def test_nfs_node_exporter_fixture_keeps_v3_and_v4_mounts_of_one_export_apart(shared_data: Path) -> None:
    samples = NfsSource(shared_data / "node-exporter-fixtures/proc/10/mountstats").collect()
    mounts = _by(samples, "nfs_mount", "mountpoint", "fstype")
    assert sorted(mounts) == [("/mnt/nfs/test", "nfs4"), ("/mnt/nfs/test-dupe", "nfs"), ("/mnt/nfs/test-dupe", "nfs4")]
    operations = _by(samples, "nfs_operation", "mountpoint", "fstype", "operation")
    # a wrapped kernel counter is still read as the integer it is
    assert operations["/mnt/nfs/test-dupe", "nfs4", "ACCESS"] == {m.NFS_OPERATIONS: 2927395007}


def test_nfs_telegraf_fixture_v3_with_direct_io(shared_data: Path) -> None:
    samples = NfsSource(shared_data / "telegraf-storage-fixtures/nfsclient/testdata/mountstats").collect()
    mounts = _by(samples, "nfs_mount", "mountpoint")
    # /A: bytes: 204440464584 110857586443 783170354688 296174954496 ... -> read normal + direct, written likewise
    assert mounts["/A",] == {m.NFS_READ_BYTES: 204440464584 + 783170354688,
                             m.NFS_WRITTEN_BYTES: 110857586443 + 296174954496}  # fmt: skip
    assert _by(samples, "nfs_operation", "mountpoint", "operation")["/A", "READ"] == {m.NFS_OPERATIONS: 600}


def test_nfs_reset_malformed_lines_and_absent_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert NfsSource(tmp_path / "mountstats").collect() == []
    shutil.copytree(NODE / "proc", tmp_path / "proc")
    mountstats = tmp_path / "proc/self/mountstats"
    source = NfsSource(mountstats)
    first = _by(source.collect(), "nfs_mount", "mountpoint")["/home",]
    assert first == {m.NFS_READ_BYTES: 4000000 + 1000000, m.NFS_WRITTEN_BYTES: 2000000 + 500000}
    text = mountstats.read_text()
    mountstats.write_text(text.replace("bytes:\t4000000 2000000 1000000 500000", "bytes:\t100 2000000 0 500000")
                          .replace("READ: 120 120", "READ: x y"))  # fmt: skip
    with caplog.at_level(logging.WARNING):
        samples = source.collect()
    # remount: the read counters restarted at 100 + 0; the total keeps growing
    assert _by(samples, "nfs_mount", "mountpoint")["/home",][m.NFS_READ_BYTES] == 5000000 + 100
    assert f"{mountstats}:13: malformed per-op line" in caplog.text
    assert _by(samples, "nfs_operation", "operation")["WRITE",] == {m.NFS_OPERATIONS: 60}


def test_lustre_2_10_client_and_job_stats(shared_data: Path) -> None:
    samples = LustreSource(shared_data / "lustre-procfs-hpe" / "proc").collect()
    # llite/lustrefs-ffff88105db50000/stats: read_bytes ... 4194304 (sum), write_bytes ... 93813797294080 (sum)
    assert _by(samples, "lustre_client", "filesystem") == {
        ("lustrefs",): {m.LUSTRE_CLIENT_READ_BYTES: 4194304, m.LUSTRE_CLIENT_WRITTEN_BYTES: 93813797294080}
    }
    jobs = _by(samples, "lustre_job", "target", "job_id")
    assert len(jobs) == 35, "35 job blocks in OST0000's job_stats; the other targets' are empty"
    assert jobs["lustrefs-OST0000", "26"] == {m.LUSTRE_JOB_READ_BYTES: 0, m.LUSTRE_JOB_WRITTEN_BYTES: 185838792704}
    job_26 = next(s for s in samples if s.entity == "lustre_job" and s.labels["job_id"] == "26")
    assert job_26.job_id == "26", "jobid_var is SLURM_JOB_ID: the Slurm job id"


def test_lustre_2_12_server_job_stats(shared_data: Path) -> None:
    root = shared_data / "telegraf-storage-fixtures" / "lustre2" / "testcases" / "v2.12" / "proc"
    jobs = _by(LustreSource(root).collect(), "lustre_job", "target", "job_id")
    assert jobs == {
        ("OST0001", "cluster-testjob1"): {m.LUSTRE_JOB_READ_BYTES: 4096, m.LUSTRE_JOB_WRITTEN_BYTES: 26214400},
        ("OST0001", "testjob2"): {m.LUSTRE_JOB_READ_BYTES: 1024, m.LUSTRE_JOB_WRITTEN_BYTES: 51200},
    }, "the MDT's job_stats count requests, not bytes"


def test_lustre_reset_malformed_and_absent(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert LustreSource(tmp_path).collect() == []
    shutil.copytree(NODE / "proc", tmp_path / "proc")
    stats = tmp_path / "proc/fs/lustre/llite/scratch-ffff9a1b2c3d4000/stats"
    source = LustreSource(tmp_path / "proc")
    assert source.collect()[0].values == {m.LUSTRE_CLIENT_READ_BYTES: 73400320, m.LUSTRE_CLIENT_WRITTEN_BYTES: 36700160}
    garbled = stats.read_text().replace("73400320", "1000").replace("50 samples [bytes]", "many samples [bytes]")
    stats.write_text(garbled)
    with caplog.at_level(logging.WARNING):
        (client,) = source.collect()
    assert client.values == {m.LUSTRE_CLIENT_READ_BYTES: 73400320 + 1000}
    assert f"{stats}:3: malformed stats line" in caplog.text
