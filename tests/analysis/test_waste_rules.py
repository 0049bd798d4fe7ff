"""Each waste reason rule on hand-written facts: when it holds, when it does not (its threshold's both sides), and
which of several that hold wins (the documented precedence)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from finops.analysis.waste import (
    INTERACTIVE,
    NO_READING,
    OVER_REQUESTED,
    REASONS,
    RULES,
    STALLED_PROCESS,
    THROTTLED,
    UNEXPLAINED,
    WAITING_ON_NETWORK,
    WAITING_ON_STORAGE,
    EpisodeFacts,
    JobGpuFacts,
    ReasonPolicy,
    judge_episode,
    judge_job_gpu,
    rate_text,
    rule_table,
)
from finops.analysis.waste_facts import episode_summaries
from finops.ingest.node_io import NodeRate

POLICY = ReasonPolicy()
QUIET = EpisodeFacts(partition="gpu", job_name="train", gpu_mean=0.0, readings=40)
"""A single-GPU job's idle episode where nothing stands out."""
LUSTRE = {"lustre_read": NodeRate(2.1e9, 3.4e9, 3600), "infiniband_received": NodeRate(2.2e9, 2.5e9, 3600)}
FABRIC = {"infiniband_transmitted": NodeRate(1.2e9, 1.5e9, 3600), "disk_read": NodeRate(5e6, 9e6, 3600)}
THROTTLED_FACTS = replace(
    QUIET, thermal_readings=30, throttled_readings=30, throttled_sm_clock=1.11e9, reference_sm_clock=1.98e9
)


def test_the_rules_are_in_their_documented_order_and_each_names_its_source() -> None:
    assert [rule.reason for rule in RULES] == [
        NO_READING, OVER_REQUESTED, THROTTLED, WAITING_ON_STORAGE, WAITING_ON_NETWORK, INTERACTIVE, STALLED_PROCESS,
        UNEXPLAINED,
    ]  # fmt: skip
    table = rule_table(replace(POLICY, storage_bytes_per_second=2.5e8))
    assert "250 MB/s or more" in table and "| 4 | **waiting on storage**" in table
    assert all(rule.source for rule in RULES) and set(REASONS) == {rule.reason for rule in RULES}


def test_nothing_standing_out_is_unexplained_and_says_what_was_looked_at() -> None:
    verdict = judge_episode(QUIET, POLICY)
    assert verdict.reason == UNEXPLAINED
    assert verdict.evidence == "nothing stood out: no storage rates, no InfiniBand rates, no throttling, no memory held"
    quiet_node = replace(QUIET, node_rates={"nfs_read": NodeRate(3e6, 4e6, 3600)})
    assert "storage 3.0 MB/s" in judge_episode(quiet_node, POLICY).evidence


def test_storage_traffic_at_the_threshold_is_waiting_on_storage_and_below_it_is_not() -> None:
    verdict = judge_episode(replace(QUIET, node_rates=LUSTRE), POLICY)
    assert (verdict.reason, verdict.evidence) == (
        WAITING_ON_STORAGE, "2.1 GB/s Lustre reads during the episode (node-wide, peak 3.4 GB/s)"
    )  # fmt: skip
    assert verdict.sentence() == f"probably waiting on storage: {verdict.evidence}"
    writes = {"nfs_written": NodeRate(1e8, 1e8, 600)}
    assert judge_episode(replace(QUIET, node_rates=writes), POLICY).reason == WAITING_ON_STORAGE, "a checkpoint too"
    below = {"disk_read": NodeRate(9.99e7, 5e8, 3600)}
    assert judge_episode(replace(QUIET, node_rates=below), POLICY).reason == UNEXPLAINED, "the mean counts, not a peak"


def test_infiniband_traffic_is_waiting_on_the_network_unless_storage_explains_it() -> None:
    verdict = judge_episode(replace(QUIET, node_rates=FABRIC), POLICY)
    assert (verdict.reason, verdict.evidence) == (
        WAITING_ON_NETWORK, "1.2 GB/s InfiniBand traffic sent during the episode (node-wide, peak 1.5 GB/s)"
    )  # fmt: skip
    assert judge_episode(replace(QUIET, node_rates=LUSTRE), POLICY).reason == WAITING_ON_STORAGE, (
        "Lustre over o2ib shows on the InfiniBand ports too: storage comes first"
    )
    slow = {"infiniband_received": NodeRate(5e7, 9e7, 3600)}
    assert judge_episode(replace(QUIET, node_rates=slow), POLICY).reason == UNEXPLAINED


def test_throttling_needs_most_readings_with_a_thermal_or_power_reason_and_a_reduced_clock() -> None:
    verdict = judge_episode(THROTTLED_FACTS, POLICY)
    assert (verdict.reason, verdict.evidence) == (
        THROTTLED, "thermal clocks-event reasons on 75 % of the readings, SM clock 1,110 MHz against 1,980 MHz before"
    )  # fmt: skip
    both = replace(THROTTLED_FACTS, power_readings=4)
    assert judge_episode(both, POLICY).evidence.startswith("thermal and power clocks-event reasons")
    assert judge_episode(replace(THROTTLED_FACTS, throttled_readings=19), POLICY).reason == UNEXPLAINED, "under half"
    assert judge_episode(replace(THROTTLED_FACTS, throttled_readings=20), POLICY).reason == THROTTLED, "half"
    full_clock = replace(THROTTLED_FACTS, throttled_sm_clock=1.9e9)
    assert judge_episode(full_clock, POLICY).reason == UNEXPLAINED, "the bit set but clocks at 96 %: not held down"
    unknown = replace(THROTTLED_FACTS, reference_sm_clock=None)
    assert judge_episode(unknown, POLICY).reason == UNEXPLAINED, "no earlier clock to compare with"
    assert judge_episode(replace(THROTTLED_FACTS, node_rates=LUSTRE), POLICY).reason == THROTTLED, (
        "the machine's fault is said before storage"
    )


def test_a_gpu_at_zero_beside_a_busy_one_is_over_requested_before_anything_else() -> None:
    facts = replace(THROTTLED_FACTS, gpu_mean=0.004, sibling_mean=0.97, node_rates=LUSTRE, job_name="jupyter-lab")
    verdict = judge_episode(facts, POLICY)
    assert (verdict.reason, verdict.evidence) == (
        OVER_REQUESTED, "this GPU at 0.4 % over the whole job so far while another GPU of the job averaged 97 %"
    )  # fmt: skip
    assert judge_episode(replace(QUIET, gpu_mean=0.02, sibling_mean=0.97), POLICY).reason == UNEXPLAINED, "not ~0"
    assert judge_episode(replace(QUIET, gpu_mean=0.0, sibling_mean=0.05), POLICY).reason == UNEXPLAINED, "idle too"
    assert judge_episode(replace(QUIET, gpu_mean=0.0, sibling_mean=None), POLICY).reason == UNEXPLAINED, "one GPU"


@pytest.mark.parametrize(
    ("partition", "name", "because"),
    [
        ("interactive", "train", "partition interactive"),
        ("gpu", "sys/dashboard/sys/jupyter", "job name sys/dashboard/sys/jupyter matches *sys/dashboard/*"),
        ("gpu", "ondemand/sys/dashboard/sys/bc_desktop", "job name ondemand/sys/dashboard/sys/bc_desktop matches "
                                                         "*sys/dashboard/*"),
        ("gpu", "jupyter-alice", "job name jupyter-alice matches jupyter*"),
        ("gpu", "bash", "job name bash"),
        ("gpu", "interactive", "job name interactive"),
    ],
)  # fmt: skip
def test_interactive_conventions(partition: str, name: str, because: str) -> None:
    verdict = judge_episode(replace(QUIET, partition=partition, job_name=name, memory_bytes=3e9), POLICY)
    assert (verdict.reason, verdict.evidence) == (INTERACTIVE, f"interactive by convention: {because}")


def test_conventions_are_the_sites() -> None:
    site = replace(POLICY, interactive_partitions=("debug",), interactive_job_names=("notebook-*",))
    assert judge_episode(replace(QUIET, partition="debug"), site).reason == INTERACTIVE
    assert judge_episode(replace(QUIET, job_name="notebook-7"), site).reason == INTERACTIVE
    assert judge_episode(replace(QUIET, partition="interactive", job_name="bash"), site).reason == UNEXPLAINED
    assert judge_episode(replace(QUIET, job_name="Bash"), POLICY).reason == UNEXPLAINED, "names match as written"


def test_memory_held_without_compute_is_a_stalled_process() -> None:
    verdict = judge_episode(replace(QUIET, memory_bytes=31.5 * 2**30), POLICY)
    assert (verdict.reason, verdict.evidence) == (STALLED_PROCESS, "31.5 GiB of GPU memory held with no compute")
    assert judge_episode(replace(QUIET, memory_bytes=64 * 2**20), POLICY).reason == UNEXPLAINED, "64 MiB: not held"
    assert judge_episode(replace(QUIET, memory_bytes=3e9, node_rates=FABRIC), POLICY).reason == WAITING_ON_NETWORK


def test_a_jobs_idle_time_outside_its_episodes() -> None:
    busy = JobGpuFacts(job_mean=0.25, gpu_mean=0.25, episodes={STALLED_PROCESS: (7200.0, "2.0 GiB held")})
    assert judge_job_gpu(busy, POLICY) is None, "at the low-utilisation threshold: a busy job"
    over = replace(busy, gpu_mean=0.0, sibling_mean=0.9)
    assert judge_job_gpu(over, POLICY).reason == OVER_REQUESTED, "a GPU left at 0 % is waste whatever the mean"
    assert judge_job_gpu(JobGpuFacts(), POLICY).reason == NO_READING
    episodes = {STALLED_PROCESS: (7200.0, "2.0 GiB held"), WAITING_ON_STORAGE: (10800.0, "2.1 GB/s Lustre reads")}
    low = replace(busy, job_mean=0.12, gpu_mean=0.12, episodes=episodes)
    verdict = judge_job_gpu(low, POLICY)
    assert verdict is not None
    assert (verdict.reason, verdict.evidence) == (
        WAITING_ON_STORAGE,
        "mean utilisation 12 %; its idle episodes: 3.0 of 5.0 GPU-h waiting on storage (2.1 GB/s Lustre reads)",
    )
    bare = judge_job_gpu(replace(low, episodes={}), POLICY)
    assert bare is not None
    assert (bare.reason, bare.evidence) == (
        UNEXPLAINED, "mean utilisation 12 %, no idle episode long enough to read a reason from"
    )  # fmt: skip
    notebook = replace(low, episodes={}, job_name="jupyter-bob")
    assert judge_job_gpu(notebook, POLICY).reason == INTERACTIVE  # type: ignore[union-attr]


def test_episode_summaries_weigh_reasons_by_time_and_skip_unjudged_episodes() -> None:
    from datetime import UTC, datetime, timedelta

    t = datetime(2026, 3, 2, tzinfo=UTC)
    rows = [
        (WAITING_ON_STORAGE, t, t + timedelta(hours=1), "short"),
        (WAITING_ON_STORAGE, t, t + timedelta(hours=2), "long"),
        (None, t, t + timedelta(hours=9), None),
    ]
    assert episode_summaries(rows) == {WAITING_ON_STORAGE: (10800.0, "long")}


def test_rates_read_as_storage_and_network_speeds_are_quoted() -> None:
    assert [rate_text(v) for v in (0, 999, 1000, 2.1e9, 3.5e8, 12.4e12)] == [
        "0.0 B/s", "999 B/s", "1.0 kB/s", "2.1 GB/s", "350 MB/s", "12 TB/s"
    ]  # fmt: skip
