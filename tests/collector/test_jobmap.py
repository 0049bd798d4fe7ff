"""GPU → job: the shipped Slurm prolog/epilog, the mapping directory, cgroups, and the mapper on NVML samples."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import orjson

from collector.agent import Agent
from collector.contract import metric_names as m
from collector.contract import wire
from collector.contract.sample import Sample
from collector.contract.wire import shared_job_utilization
from collector.exposition import LatestSamples
from collector.jobmap.cgroup import job_of_cgroup
from collector.jobmap.mapper import JobMapper
from collector.jobmap.mapping_dir import read_mappings
from collector.sources.nvml import NvmlSource
from tests.support.fake_pynvml import CAPTURES, ManualClock, fake_nvml_from_capture

SCRIPTS = Path(__file__).resolve().parents[2] / "collector" / "jobmap" / "slurm"
PROC = Path(__file__).parents[1] / "fixtures" / "jobmap" / "proc"
H100_MIG = "linux-x86_64__nvidia-h100-mig__590.48.01.txt"
MASKED_UUID = "GPU-00000000-0000-0000-0000-000000000000"


def _run(script: str, directory: Path, tmp_path: Path, **env: str) -> None:
    fake_smi = tmp_path / "nvidia-smi"
    fake_smi.write_text("#!/bin/sh\nprintf '0, GPU-aaaa\\n1, GPU-bbbb\\n2, GPU-cccc\\n'\n")
    fake_smi.chmod(0o755)
    environment = {"PATH": os.environ["PATH"], "GPU_JOB_MAPPING_DIR": str(directory), "NVIDIA_SMI": str(fake_smi)}
    subprocess.run(["sh", str(SCRIPTS / script)], env=environment | env, check=True)


def test_prolog_writes_by_index_and_uuid_and_epilog_removes_only_its_job(tmp_path: Path) -> None:
    directory = tmp_path / "gpustat"
    _run("prolog.sh", directory, tmp_path, SLURM_JOB_ID="7301", SLURM_JOB_UID="1000", SLURM_JOB_GPUS="0,2")
    _run("prolog.sh", directory, tmp_path, SLURM_JOB_ID="7302", SLURM_JOB_UID="1001", SLURM_JOB_GPUS="1",
         CUDA_VISIBLE_DEVICES="MIG-1111,MIG-2222")  # fmt: skip
    assert sorted(p.name for p in directory.iterdir()) == ["0", "1", "2", "GPU-aaaa", "GPU-bbbb", "GPU-cccc",
                                                            "MIG-1111", "MIG-2222"]  # fmt: skip
    assert (directory / "2").read_text() == "7301 1000\n", "jobstats' /run/gpustat line: job id and uid"
    first = {"0": "7301", "2": "7301", "GPU-aaaa": "7301", "GPU-cccc": "7301"}
    second = {"1": "7302", "GPU-bbbb": "7302", "MIG-1111": "7302", "MIG-2222": "7302"}
    assert read_mappings(directory).live == first | second
    before = datetime.now(UTC)
    _run("epilog.sh", directory, tmp_path, SLURM_JOB_ID="7301")
    after = datetime.now(UTC)
    assert sorted(p.name for p in directory.iterdir() if not p.name.startswith(".")) == [
        "1", "GPU-bbbb", "MIG-1111", "MIG-2222"
    ]  # fmt: skip
    mappings = read_mappings(directory)
    assert mappings.live == second
    assert {name: job for name, (job, _) in mappings.ended.items()} == first, "the end records of 7301's files"
    assert {before <= end <= after for _, end in mappings.ended.values()} == {True}
    assert sorted(p.name for p in directory.iterdir() if p.name.startswith(".")) == [
        ".ended.0", ".ended.2", ".ended.GPU-aaaa", ".ended.GPU-cccc"
    ], "no temporary file left"  # fmt: skip


AMD_UUIDS = [f"5cff74b5-0000-1000-80{p}0-7e3e3a6ed2a1" for p in range(8)]
"""The MI300X CPX partitions of tests/fixtures/amd/device-metrics-exporter.prom (UUIDs written by hand)."""


def test_prolog_records_amd_gpus_by_index_and_amd_smi_uuid_and_the_mapper_maps_them(tmp_path: Path) -> None:
    """An MI300X node in CPX mode (8 partitions, each a GPU to Slurm): no nvidia-smi; amd-smi lists the partitions
    (``amd-smi list --csv``, header columns gpu and gpu_uuid). Job 7001 holds partitions 0-3 (SLURM_JOB_GPUS), job
    7002 is bound by ROCR_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES to a UUID; their numbers (the job's own count from 0)
    are not recorded. The mapper then puts each job on its partitions' samples, by UUID."""
    fake_amd_smi = tmp_path / "amd-smi"
    rows = "".join(f"{i},0000:{i + 5:02x}:00.0,{uuid},{i + 2},{i + 2},{i}\\n" for i, uuid in enumerate(AMD_UUIDS))
    fake_amd_smi.write_text(f"#!/bin/sh\n[ \"$*\" = 'list --csv' ] || exit 2\n"
                            f"printf 'gpu,gpu_bdf,gpu_uuid,kfd_id,node_id,partition_id\\n{rows}'\n")  # fmt: skip
    fake_amd_smi.chmod(0o755)
    directory = tmp_path / "gpustat"
    amd = {"NVIDIA_SMI": str(tmp_path / "absent"), "AMD_SMI": str(fake_amd_smi)}
    _run("prolog.sh", directory, tmp_path, SLURM_JOB_ID="7001", SLURM_JOB_UID="1000", SLURM_JOB_GPUS="0,1,2,3", **amd)
    _run("prolog.sh", directory, tmp_path, SLURM_JOB_ID="7002", SLURM_JOB_UID="1001",
         ROCR_VISIBLE_DEVICES=f"{AMD_UUIDS[6]},0", HIP_VISIBLE_DEVICES="0", **amd)  # fmt: skip
    mappings = read_mappings(directory)
    assert mappings.live == {str(i): "7001" for i in range(4)} | dict.fromkeys(AMD_UUIDS[:4], "7001") | {
        AMD_UUIDS[6]: "7002"
    }
    now = datetime.now(UTC)
    samples = [
        Sample("gpu", {"gpu": str(i), "uuid": uuid, "model": "AMD Instinct MI300X OAM"}, {m.GPU_UTILIZATION: 1.0}, now)
        for i, uuid in enumerate(AMD_UUIDS)
    ]
    jobs = [s.job_id for s in JobMapper(directory, PROC).annotate(samples)]
    assert jobs == ["7001"] * 4 + [None, None, "7002", None]
    _run("epilog.sh", directory, tmp_path, SLURM_JOB_ID="7001")
    assert read_mappings(directory).live == {AMD_UUIDS[6]: "7002"}


def test_prolog_of_a_job_without_gpus_writes_nothing(tmp_path: Path) -> None:
    _run("prolog.sh", tmp_path / "gpustat", tmp_path, SLURM_JOB_ID="9")
    assert not (tmp_path / "gpustat").exists()


def test_mapping_dir_formats(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("4242\n")  # dcgm-exporter: job ids one per line
    (tmp_path / "1").write_text("4243 1000\n")  # jobstats: job id and uid
    (tmp_path / "2").write_text("4244\n4245\n")  # shared by two jobs: no single job
    (tmp_path / "3").write_text("")
    (tmp_path / ".ended.4").write_text("4246 1764400000.25\n")  # our epilog's end record
    (tmp_path / ".ended.5").write_text("4247 yesterday\n")  # not one: skipped
    (tmp_path / ".5.1234").write_text("4248 1000\n")  # the prolog's temporary file
    mappings = read_mappings(tmp_path)
    assert mappings.live == {"0": "4242", "1": "4243"}
    assert mappings.ended == {"4": ("4246", datetime(2025, 11, 29, 7, 6, 40, 250000, tzinfo=UTC))}
    assert read_mappings(tmp_path / "absent").live == {}


def test_cgroup_paths_of_slurm_and_kubernetes() -> None:
    assert job_of_cgroup((PROC / "21180" / "cgroup").read_text()) == "7301"  # v1 /slurm/uid_1000/job_7301/…
    assert job_of_cgroup((PROC / "21181" / "cgroup").read_text()) == "7301"  # v2 slurmstepd.scope/job_7301/…
    pod = "pod/6f1c2a9e-3b4d-4e5f-8a7b-0c1d2e3f4a5b"
    assert job_of_cgroup((PROC / "4000" / "cgroup").read_text()) == pod  # systemd driver, _ for -
    assert job_of_cgroup((PROC / "4001" / "cgroup").read_text()) == pod  # cgroupfs driver
    assert job_of_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n") is None


def _h100_mig_samples(shared_data: Path) -> list[Sample]:
    clock = ManualClock()
    return NvmlSource(fake_nvml_from_capture(shared_data / CAPTURES / H100_MIG, "load", clock), clock).collect()


def test_mapping_dir_wins_by_uuid_then_index(shared_data: Path, tmp_path: Path) -> None:
    samples = _h100_mig_samples(shared_data)
    (tmp_path / "0").write_text("500 1000\n")
    (tmp_path / "MIG-00000002-0000-0000-0000-000000000002").write_text("501 1000\n")
    annotated = JobMapper(tmp_path, PROC).annotate(samples)
    jobs = {s.labels["uuid"]: s.job_id for s in annotated if s.entity == "gpu"}
    assert jobs[MASKED_UUID] == "500", "the whole GPU by its index"
    assert jobs["MIG-00000002-0000-0000-0000-000000000002"] == "501"
    assert jobs["MIG-00000000-0000-0000-0000-000000000000"] is None, "an index never names a MIG instance"


def test_processes_cgroups_name_the_job_and_two_jobs_name_none(shared_data: Path) -> None:
    samples = _h100_mig_samples(shared_data)
    # the capture's processes 21180, 21181 (job 7301) and 21198 (job 7302) all run on the GPU
    (gpu,) = [s for s in JobMapper(None, PROC).annotate(samples) if s.labels.get("mig_profile") == ""]
    assert gpu.job_id is None, "processes of two jobs: no single job"
    without_7302 = [s for s in samples if s.labels.get("pid") != "21198"]
    (gpu,) = [s for s in JobMapper(None, PROC).annotate(without_7302) if s.labels.get("mig_profile") == ""]
    assert gpu.job_id == "7301"


def test_a_job_already_on_the_sample_is_kept_and_vanished_pids_map_to_nothing(
    shared_data: Path, tmp_path: Path
) -> None:
    samples = _h100_mig_samples(shared_data)
    labelled = [
        s if s.entity != "gpu" else Sample(s.entity, s.labels, s.values, s.timestamp, "dcgm-42") for s in samples
    ]
    assert {s.job_id for s in JobMapper(None, PROC).annotate(labelled) if s.entity == "gpu"} == {"dcgm-42"}
    empty_proc = tmp_path / "proc"
    empty_proc.mkdir()
    assert {s.job_id for s in JobMapper(None, empty_proc).annotate(samples) if s.entity == "gpu"} == {None}


H100 = "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"


def _proc(tmp_path: Path, jobs: dict[int, str]) -> Path:
    """A procfs with a cgroup v2 file per pid: Slurm job ``jobs[pid]`` (hand-written placement of the capture's
    PIDs, in the form of fixtures/jobmap/proc/21181)."""
    for pid, job in jobs.items():
        (tmp_path / "proc" / str(pid)).mkdir(parents=True)
        (tmp_path / "proc" / str(pid) / "cgroup").write_text(f"0::/system.slice/slurmstepd.scope/job_{job}/step_0\n")
    return tmp_path / "proc"


def _h100_cycles(shared_data: Path, proc: Path, cycles: int = 2) -> list[list[Sample]]:
    """``cycles`` annotated collections of the H100 load capture, 10 s apart (the first at the fake's load)."""
    clock = ManualClock()
    source = NvmlSource(fake_nvml_from_capture(shared_data / CAPTURES / H100, "load", clock), clock)
    mapper = JobMapper(None, proc)
    collected = []
    for _ in range(cycles):
        collected.append(mapper.annotate(source.collect()))
        clock.advance(10)
    return collected


def test_a_gpu_time_sliced_by_two_jobs_gives_each_job_its_sm_share(shared_data: Path, tmp_path: Path) -> None:
    # the capture's two memhog processes in job 8101, gpu_burn in job 8102
    first, second = _h100_cycles(shared_data, _proc(tmp_path, {11327: "8101", 11328: "8101", 11345: "8102"}))
    assert {s.labels["pid"]: s.job_id for s in second if s.entity == "gpu_process"} == {
        "11327": "8101", "11328": "8101", "11345": "8102"
    }  # fmt: skip
    assert [s.job_id for s in second if s.entity == "gpu"] == [None], "no single job"
    # pmon: gpu_burn sm 99 %, memhog "-" (no sample: no kernel ran)
    assert shared_job_utilization(second) == {MASKED_UUID: {"8101": 0.0, "8102": 0.99}}
    assert shared_job_utilization(first) == {}, "no sample period had passed: utilisation unknown, no partial shares"

    batch = wire.batch_dict(second)
    (gpu,) = [s for s in second if s.entity == "gpu"]
    ts = int(gpu.timestamp.timestamp())
    assert batch["job_utilization"] == [
        {"uuid": MASKED_UUID, "ts": ts, "job_id": "8101", "utilization_ratio": 0.0},
        {"uuid": MASKED_UUID, "ts": ts, "job_id": "8102", "utilization_ratio": 0.99},
    ]
    body = {"node": "gpu-a-01", **wire.columnar(wire.merge_batches([wire.batch_dict(first), batch]))}
    assert body["job_utilization"] == batch["job_utilization"]
    parsed = wire.IngestBatch.model_validate_json(orjson.dumps(body))
    assert [(j.job_id, j.utilization_ratio) for j in parsed.job_utilization] == [("8101", 0.0), ("8102", 0.99)]
    assert parsed.series[0].ts == [ts - 10, ts]


def test_a_gpu_of_one_job_ships_no_shares(shared_data: Path, tmp_path: Path) -> None:
    _, second = _h100_cycles(shared_data, _proc(tmp_path, {11327: "8101", 11328: "8101", 11345: "8101"}))
    assert [s.job_id for s in second if s.entity == "gpu"] == ["8101"]
    assert shared_job_utilization(second) == {}
    assert "job_utilization" not in wire.batch_dict(second)


def test_shares_sum_a_jobs_processes_capped_at_one_and_need_every_mapped_process() -> None:
    when = datetime(2026, 3, 1, tzinfo=UTC)

    def process(pid: str, job: str | None, ratio: float | None, uuid: str = "GPU-1") -> Sample:
        values = {} if ratio is None else {m.GPU_PROCESS_SM_UTILIZATION: ratio}
        return Sample("gpu_process", {"gpu": "0", "uuid": uuid, "pid": pid}, values, when, job)

    mps = [process("1", "10", 0.7), process("2", "10", 0.6), process("3", "11", 0.25), process("4", None, 0.5)]
    assert shared_job_utilization(mps) == {"GPU-1": {"10": 1.0, "11": 0.25}}, "MPS clients of job 10: capped"
    assert shared_job_utilization([*mps, process("5", "12", None)]) == {}, "job 12's share unknown"
    elsewhere = [process("6", "13", 0.5, "GPU-2"), process("7", "14", None, "GPU-2")]
    assert shared_job_utilization([*mps, *elsewhere]) == {"GPU-1": {"10": 1.0, "11": 0.25}}


def test_older_batches_without_job_utilization_still_merge_and_validate() -> None:
    old = {"gpus": [], "samples": [{"uuid": "GPU-1", "ts": "2026-03-01T00:00:00Z", "utilization_ratio": 0.5}]}
    merged = wire.merge_batches([old, old])
    assert "job_utilization" not in merged and len(merged["samples"]) == 2
    parsed = wire.IngestBatch.model_validate({"node": "n", **wire.columnar(merged)})
    assert parsed.job_utilization == [] and parsed.reading_count == 2


def test_a_reading_taken_before_the_epilog_keeps_its_job(shared_data: Path, tmp_path: Path) -> None:
    """The real prolog and epilog on a directory; the epilog runs while the nvml source reads the GPU, after the
    reading's timestamp and before the cycle maps it: the reading keeps the job; the next cycle's has none; once
    the next job's prolog ran, a reading from before the first job's end still maps to the first job."""
    directory, proc = tmp_path / "gpustat", tmp_path / "proc"
    proc.mkdir()
    _run("prolog.sh", directory, tmp_path, SLURM_JOB_ID="7301", SLURM_JOB_UID="1000", SLURM_JOB_GPUS="0")
    stamped: list[datetime] = []

    def clock_then_epilog() -> datetime:
        stamped.append(datetime.now(UTC))
        if len(stamped) == 1:  # the job ends on the node while the first cycle reads its GPU
            _run("epilog.sh", directory, tmp_path, SLURM_JOB_ID="7301")
        return stamped[-1]

    nvml = fake_nvml_from_capture(shared_data / CAPTURES / H100, "load", ManualClock())
    mapper = JobMapper(directory, proc)
    agent = Agent([NvmlSource(nvml, clock_then_epilog)], LatestSamples(), None, annotate=mapper.annotate)
    (first,) = [s for s in agent.collect_once() if s.entity == "gpu"]
    assert not (directory / "0").exists(), "the epilog ran before the cycle mapped the reading"
    assert first.job_id == "7301"
    (second,) = [s for s in agent.collect_once() if s.entity == "gpu"]
    assert second.job_id is None, "taken after the job's end"
    _run("prolog.sh", directory, tmp_path, SLURM_JOB_ID="7302", SLURM_JOB_UID="1001", SLURM_JOB_GPUS="0")
    late = dataclasses.replace(first, job_id=None)  # stamped before 7301's end, mapped now
    new = dataclasses.replace(late, timestamp=datetime.now(UTC))
    assert [s.job_id for s in mapper.annotate([late, new])] == ["7301", "7302"]
    assert stamped[0] < read_mappings(directory).ended["0"][1] < stamped[1]
