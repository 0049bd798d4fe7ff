"""The demo's derived hardware activity and waits: read from the real captures, seeded, within their jitter."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

import pytest

from collector.contract import metric_names as m
from collector.contract.clocks_events import CLOCKS_EVENT_REASONS
from collector.contract.wire import NodeIo
from finops.demo.activity import profile_from_capture as gpu_from_capture
from finops.demo.allocation import TeamSeries, derive_jobs, node_names
from finops.demo.helios import load_helios
from finops.demo.profiling import ACTIVITY_METRICS, JITTER, load_profiles, profile_from_capture
from finops.demo.runner import H100_CAPTURE
from finops.demo.waits import INFINIBAND, INTERACTIVE, LUSTRE, NFS, NODE_TRAFFIC, STALLED, THROTTLED, draw_wait
from finops.demo.workload import Readings, Trace, node_steps, plan_jobs, sacct_lines

START = datetime(2026, 5, 11, tzinfo=UTC)
MINUTES = 1200


def test_profiles_are_the_captures_ratios(shared_data: Path) -> None:
    profiles, idle = load_profiles(shared_data)
    training, inefficient = profiles
    # SOURCE.md's figures of the A100 busy capture (no utilisation field: taken as it is).
    assert training.ratios[m.GPU_TENSOR_ACTIVE] == pytest.approx(0.929, abs=5e-4)
    assert training.ratios[m.GPU_DRAM_ACTIVE] == pytest.approx(0.691, abs=5e-4)
    engine = training.ratios[m.GPU_GRAPHICS_ENGINE_ACTIVE]
    assert training.ratios[m.GPU_SM_ACTIVE] == engine == pytest.approx(0.996, abs=5e-4)
    # The T4's: activity per unit of its 91 % utilisation.
    assert inefficient.ratios[m.GPU_GRAPHICS_ENGINE_ACTIVE] == pytest.approx(0.156205 / 0.91)
    assert inefficient.ratios[m.GPU_TENSOR_ACTIVE] == pytest.approx(0.005822 / 0.91)
    assert inefficient.ratios[m.GPU_DRAM_ACTIVE] == pytest.approx(0.092781 / 0.91)
    # In no capture: not measured, never 0.
    assert m.GPU_SM_OCCUPANCY not in training.ratios and m.GPU_FP16_ACTIVE not in inefficient.ratios
    assert "nvidia-docs-a100-mig-busy.prom" in training.capture and "tesla-t4" in inefficient.capture
    assert idle == {m.GPU_SM_ACTIVE: 0.0, m.GPU_TENSOR_ACTIVE: 0.0, m.GPU_DRAM_ACTIVE: 0.0,
                    m.GPU_GRAPHICS_ENGINE_ACTIVE: 0.0}  # fmt: skip


def test_a_capture_without_activity_is_refused_by_name(tmp_path: Path) -> None:
    capture = tmp_path / "no-prof.prom"
    capture.write_text('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"} 50\n')
    with pytest.raises(ValueError, match=r"no-prof\.prom"):
        profile_from_capture("x", capture, "GPU")
    assert load_profiles(tmp_path) == ((), {})  # no captures folder: nothing measured


def test_draw_wait_follows_the_cumulative_weights() -> None:
    weights = ((LUSTRE, 0.5), (None, 0.5))
    assert draw_wait(0.49, weights) == LUSTRE and draw_wait(0.5, weights) is None and draw_wait(0.999, weights) is None


@pytest.fixture(scope="module")
def slice_trace(shared_data: Path) -> tuple[Trace, Readings]:
    week = load_helios(shared_data / "helios-earth-vc-allocation")
    series = [TeamSeries(s.team, s.quota, s.running[:MINUTES]) for s in week]
    jobs = derive_jobs(series)
    profiles, idle = load_profiles(shared_data)
    trace = Trace(jobs, node_names(series), START, MINUTES, plan_jobs(jobs, profiles))
    return trace, Readings(gpu_from_capture(shared_data / H100_CAPTURE), idle)


def test_plans_are_seeded(slice_trace: tuple[Trace, Readings], shared_data: Path) -> None:
    trace, _ = slice_trace
    profiles, _ = load_profiles(shared_data)
    assert plan_jobs(trace.jobs, profiles) == trace.plans
    assert plan_jobs(trace.jobs, profiles, seed=14) != trace.plans
    # Without the captures, the same draws with no profile: every job not measured.
    unmeasured = {n: replace(p, profile=None) for n, p in trace.plans.items()}
    assert plan_jobs(trace.jobs, ()) == unmeasured


def test_busy_activity_means_per_profile_lie_within_the_jitter(slice_trace: tuple[Trace, Readings]) -> None:
    trace, readings = slice_trace
    sums: dict[tuple[str, str], list[float]] = defaultdict(list)
    unprofiled = profiled = 0
    for node in trace.nodes:
        for step in node_steps(trace, node, readings):
            for sample in step:
                activity = [metric for metric in ACTIVITY_METRICS if metric in sample.values]
                if sample.job_id is None:
                    assert sample.values[m.GPU_SM_ACTIVE] == 0.0  # a free GPU, measured idle
                    continue
                plan = trace.plan(int(sample.job_id))
                if plan.profile is None:
                    assert not activity  # not measured: no field at all, never 0
                    unprofiled += 1
                    continue
                profiled += 1
                if sample.values[m.GPU_UTILIZATION] == 0:
                    assert all(sample.values[metric] == 0.0 for metric in activity)
                    continue
                assert set(activity) == set(plan.profile.ratios)
                for metric in activity:
                    sums[plan.profile.name, metric].append(sample.values[metric])
    assert unprofiled and profiled > 2 * unprofiled
    profiles = {plan.profile.name: plan.profile for plan in trace.plans.values() if plan.profile is not None}
    assert len(profiles) == 2
    for (name, metric), values in sums.items():
        ratio = profiles[name].ratios[metric]
        mean = sum(values) / len(values)
        assert min(1.0, ratio * (1 - JITTER)) <= mean <= min(1.0, ratio * (1 + JITTER)), (name, metric, mean)
    # The two profiles differ as their captures do: tensor-core training against kernel-busy and inefficient.
    tensor = {name: sum(v) / len(v) for (name, metric), v in sums.items() if metric == m.GPU_TENSOR_ACTIVE}
    assert tensor["tensor-core training"] > 0.8 > 0.01 > tensor["kernel-busy, inefficient"]


def test_idle_jobs_carry_their_waits_evidence(slice_trace: tuple[Trace, Readings]) -> None:
    trace, readings = slice_trace
    traffic = trace.traffic()
    waits = {plan.wait for plan in trace.plans.values() if not plan.busy}
    assert {LUSTRE, NFS, INFINIBAND, THROTTLED, STALLED, INTERACTIVE} <= waits
    names = {line.split("|")[0]: line.split("|")[-1] for line in sacct_lines(trace)}  # JobName is the last field
    checked = set()
    for job in trace.jobs:
        plan = trace.plan(job.job_number)
        end = MINUTES if job.end is None else job.end
        gpu = job.gpus[0]
        values = readings.held(plan, gpu)
        if plan.wait in NODE_TRAFFIC and plan.wait not in checked:
            entries = [NodeIo.model_validate(e) for e in traffic.entries(gpu[0], job.start, end)]
            assert len(entries) == end - job.start  # one entry a minute, valid on the wire
            for kind, rate in NODE_TRAFFIC[plan.wait].items():
                assert all(e.rates()[kind] >= rate for e in entries)
            checked.add(plan.wait)
        if plan.wait == THROTTLED:
            assert int(values[m.GPU_CLOCKS_EVENT_REASONS]) & CLOCKS_EVENT_REASONS["sw_thermal"]
            # Bursts at full clock give the throttled rule a faster clock within the day before each idle stretch.
            segments = readings.segments(plan, gpu, job.start, end)
            bounds = [(first, last) for first, last, _ in segments]
            assert bounds[0] == (job.start, min(end, job.start + 10)) and bounds[-1][1] == end
            assert all(last == first for (_, last), (first, _) in pairwise(bounds))
            clocks = [read[m.GPU_SM_CLOCK] for _, _, read in segments]
            assert set(clocks[::2]) == {1980e6} and set(clocks[1::2]) <= {values[m.GPU_SM_CLOCK]} != {1980e6}
        if plan.wait == STALLED:
            assert values[m.GPU_MEMORY_USED] > 64 * 2**20 and values[m.GPU_UTILIZATION] == 0
        interactive = names[str(job.job_number)] == f"jupyter-{job.team.lower()}-user"
        assert interactive == (plan.wait == INTERACTIVE)
        if plan.spare is not None:
            assert plan.busy and readings.held(plan, plan.spare)[m.GPU_UTILIZATION] == 0
            assert readings.held(plan, min(job.gpus))[m.GPU_UTILIZATION] == 1.0
    assert checked == set(NODE_TRAFFIC)
    # Nodes where no job waits report no rate at all (not measured), never 0.
    quiet = [node for node in trace.nodes if not traffic.entries(node, 0, MINUTES)]
    assert quiet
