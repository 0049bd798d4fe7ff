"""The probable bottleneck of a "busy but inefficient" job — kernels running most of the time (mean utilisation at or
above :attr:`~finops.savings.efficiency_policy.EfficiencyPolicy.busy_utilization_ratio`) while the SMs sat mostly
empty (SM activity below the ineffective band) — from data the service already keeps, with the evidence that showed
it ("DRAM active 0.71, SM active 0.18, tensor active 0.02").

The rules (:data:`RULES`) are tried in order and the first that holds is the bottleneck; a rule whose data was not
measured does not hold, and the evidence of ``unexplained`` names what was not measured:

1. **memory-bound**: the kernels wait on device memory (DRAM busy, SMs and tensor pipes not).
2. **input-bound**: storage reads on the job's nodes while its SM activity saw-tooths across its hours (the GPU
   alternates between computing and waiting for the next batch). Before the network: Lustre over ``o2ib`` and NFS
   over RDMA move their bytes over the InfiniBand ports, so input shows on both (the waste reasons' order too).
3. **communication-bound**: InfiniBand traffic on the job's nodes during its hours (collectives, peers' data).
   NVLink traffic is exported on the collector's ``/metrics`` only and not stored by the service: not measured.
4. **no tensor cores**: the FP32 pipe is busy while the tensor pipes are idle (FP32 math where TF32/BF16/FP16
   tensor-core kernels would do).
5. **low occupancy**: the SMs have work but few resident warps (small grids or blocks, register or shared-memory
   limits).
6. **unexplained**: none of the above.

The facts (:class:`JobFacts`) are the ledger's per-job means of the activity columns, weighted by profiled seconds as
the cost report's (:mod:`finops.savings.efficiency`), the hourly SM means, and the job's nodes' fabric and storage
rates per hour (:func:`finops.ingest.node_io.node_rates`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from finops.analysis.waste import NETWORK_KINDS, STORAGE_KINDS, rate_text
from finops.ingest.node_io import NodeRate
from finops.savings.efficiency_policy import EfficiencyPolicy

MEMORY_BOUND = "memory_bound"
COMMUNICATION_BOUND = "communication_bound"
INPUT_BOUND = "input_bound"
NO_TENSOR_CORES = "no_tensor_cores"
LOW_OCCUPANCY = "low_occupancy"
UNEXPLAINED = "unexplained"
NVLINK_NOT_MEASURED = "NVLink not measured (the collector's /metrics only)"
READ_KINDS: dict[str, str] = {kind: name for kind, name in STORAGE_KINDS.items() if kind.endswith("_read")}
"""The storage kinds of ``node_io`` that are reads (input): Lustre, NFS and local disk reads."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One bottleneck: its key, its title as people read it, when it holds (``condition``, with ``{name}`` fields of
    :func:`figures`), where its data and thresholds come from (``source``) and the usual fix (``fix``)."""

    key: str
    title: str
    condition: str
    source: str
    fix: str


RULES: tuple[Rule, ...] = (
    Rule(
        MEMORY_BOUND,
        "memory-bound",
        "DRAM active ≥ {dram_high} while SM active < {ineffective} and tensor active < {tensor_low}",
        "the ledger's `dram_active_ratio` (DCGM_FI_PROF_DRAM_ACTIVE: the share of cycles the device memory "
        "interface sent or received data), `sm_active_ratio` and `tensor_active_ratio`, per-job means over the "
        "profiled GPU-seconds. At {dram_high} the memory interface moves data half the time while the SMs sit "
        "mostly empty: the kernels wait on memory.",
        "fuse element-wise kernels (torch.compile), use larger batches, keep data in lower precision (BF16/FP8)",
    ),
    Rule(
        INPUT_BOUND,
        "input-bound",
        "the job's nodes read NFS, Lustre or local disks at {storage} or more (mean over the job's hours) and the "
        "coefficient of variation (population standard deviation ÷ mean) of the job's hourly SM activity means is "
        "at least {sawtooth_cv}, over at least {sawtooth_min_hours} hours that measured it",
        "the collectors' `node_io` rates per node and hour (NFS mountstats, Lustre llite stats, /proc/diskstats) and "
        "the ledger's hourly `sm_active_ratio` of the job (mean over its GPUs, weighted by profiled seconds). A job "
        "starved between batches computes in bursts: its SM activity rises and falls from hour to hour. Hours are "
        "the ledger's resolution: a saw-tooth within each hour is invisible here.",
        "more data-loader workers, pinned memory and prefetching, a dataset on local NVMe or in a streaming format",
    ),
    Rule(
        COMMUNICATION_BOUND,
        "communication-bound",
        "the job's nodes received or sent {network} or more over InfiniBand, mean over the job's hours",
        "the collectors' `node_io` rates per node and hour (sysfs `port_rcv_data`/`port_xmit_data`), the threshold of "
        "the waste reason *waiting on the network*. Node-wide: another job on the node adds to it. NVLink traffic "
        "(DCGM_FI_PROF_NVLINK_*) is on the collector's `/metrics` only, not stored by the service: not measured.",
        "overlap communication with compute (gradient bucketing, FSDP prefetch), fewer nodes, a larger per-GPU batch",
    ),
    Rule(
        NO_TENSOR_CORES,
        "no tensor cores",
        "FP32 pipe active ≥ {fp32_busy} while tensor active ≤ {tensor_idle}",
        "the ledger's `fp32_active_ratio` (DCGM_FI_PROF_PIPE_FP32_ACTIVE) and `tensor_active_ratio` "
        "(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE): FP32 math on the CUDA cores while the tensor cores idle.",
        "mixed precision (torch.autocast with BF16/FP16) or TF32 (torch.backends.cuda.matmul.allow_tf32 = True)",
    ),
    Rule(
        LOW_OCCUPANCY,
        "low occupancy",
        "SM occupancy < {occupancy_low} while SM active ≥ {occupancy_sm_active}",
        "the ledger's `sm_occupancy_ratio` (DCGM_FI_PROF_SM_OCCUPANCY: resident warps as a share of the SMs' "
        "maximum, per elapsed cycle) and `sm_active_ratio`: the SMs have work, but few warps to hide latency with.",
        "larger batches or grids, fewer registers or less shared memory per block, fused kernels",
    ),
    Rule(
        UNEXPLAINED,
        "unexplained",
        "none of the above",
        "the evidence names what was looked at and which fields were not measured.",
        "profile the job (Nsight Systems) to find where its kernels wait",
    ),
)
"""The bottlenecks in precedence order: the first whose condition holds is a job's."""

BOTTLENECKS: dict[str, Rule] = {rule.key: rule for rule in RULES}
"""Bottleneck key → its rule."""


def figures(policy: EfficiencyPolicy) -> dict[str, str]:
    """The thresholds as the rules' texts show them: ``{"dram_high": "0.5", "network": "100 MB/s", …}``."""
    ratios = ("ineffective", "dram_high", "tensor_low", "fp32_busy", "tensor_idle", "occupancy_low",
              "occupancy_sm_active")  # fmt: skip
    shown = {name: f"{getattr(policy, name + '_ratio'):g}" for name in ratios}
    return {
        **shown,
        "network": rate_text(policy.network_bytes_per_second),
        "storage": rate_text(policy.storage_bytes_per_second),
        "sawtooth_cv": f"{policy.sawtooth_cv:g}",
        "sawtooth_min_hours": str(policy.sawtooth_min_hours),
    }


def rule_table(policy: EfficiencyPolicy | None = None) -> str:
    """The rules as a Markdown table (precedence, bottleneck, when it holds, data and source, usual fix) with
    ``policy``'s thresholds (default: the defaults): the table of docs/efficiency.md."""
    shown = figures(policy or EfficiencyPolicy())
    lines = ["| # | bottleneck | when it holds | data and source | usual fix |", "|---|---|---|---|---|"]
    for number, rule in enumerate(RULES, start=1):
        condition, source = rule.condition.format(**shown), rule.source.format(**shown)
        lines.append(f"| {number} | **{rule.title}** (`{rule.key}`) | {condition} | {source} | {rule.fix} |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What is known of a job's GPUs over the period: ``activity`` maps an activity (``sm_active``,
    ``sm_occupancy``, ``tensor_active``, ``dram_active``, ``fp32_active``, …) to its mean over the profiled
    GPU-seconds that measured it (absent or None: not measured); ``hourly_sm_active``: the job's SM activity mean of
    each hour that measured it; ``node_rates``: kind → rate over the job's hours on its nodes (absent: no reading)."""

    activity: Mapping[str, float | None] = field(default_factory=dict)
    hourly_sm_active: Sequence[float] = ()
    node_rates: Mapping[str, NodeRate] = field(default_factory=dict)

    def mean(self, name: str) -> float | None:
        """The mean of activity ``name``, None when not measured."""
        return self.activity.get(name)

    def sawtooth(self) -> float | None:
        """The coefficient of variation of :attr:`hourly_sm_active` (population standard deviation ÷ mean); None
        with fewer than two hours or a zero mean."""
        hours = list(self.hourly_sm_active)
        if len(hours) < 2:
            return None
        mean = statistics.fmean(hours)
        return statistics.pstdev(hours) / mean if mean > 0 else None


@dataclass(frozen=True, slots=True)
class Bottleneck:
    """A bottleneck (a key of :data:`BOTTLENECKS`) and the evidence for it, one line of text."""

    key: str
    evidence: str

    @property
    def title(self) -> str:
        """The bottleneck as people read it ("memory-bound")."""
        return BOTTLENECKS[self.key].title

    @property
    def fix(self) -> str:
        """The usual fix of the bottleneck."""
        return BOTTLENECKS[self.key].fix


def judge(facts: JobFacts, policy: EfficiencyPolicy) -> Bottleneck:
    """The probable bottleneck of a busy-but-inefficient job: the first rule of :data:`RULES` its ``facts`` meet."""
    sm, tensor, dram = facts.mean("sm_active"), facts.mean("tensor_active"), facts.mean("dram_active")
    occupancy, fp32 = facts.mean("sm_occupancy"), facts.mean("fp32_active")
    if (
        dram is not None
        and sm is not None
        and tensor is not None
        and dram >= policy.dram_high_ratio
        and sm < policy.ineffective_ratio
        and tensor < policy.tensor_low_ratio
    ):
        return Bottleneck(
            MEMORY_BOUND, f"DRAM active {_ratio(dram)}, SM active {_ratio(sm)}, tensor active {_ratio(tensor)}"
        )
    kind, storage = _fastest(facts.node_rates, READ_KINDS)
    cv = facts.sawtooth()
    if (
        storage is not None
        and storage.mean >= policy.storage_bytes_per_second
        and cv is not None
        and cv >= policy.sawtooth_cv
        and len(facts.hourly_sm_active) >= policy.sawtooth_min_hours
    ):
        return Bottleneck(
            INPUT_BOUND,
            f"{rate_text(storage.mean)} {READ_KINDS[kind]} on the job's nodes while its hourly SM activity "
            f"varied by {cv:.2f} (coefficient of variation over {len(facts.hourly_sm_active)} hours, "
            f"{_ratio(min(facts.hourly_sm_active))} to {_ratio(max(facts.hourly_sm_active))})",
        )
    kind, network = _fastest(facts.node_rates, NETWORK_KINDS)
    if network is not None and network.mean >= policy.network_bytes_per_second:
        return Bottleneck(
            COMMUNICATION_BOUND,
            f"{rate_text(network.mean)} {NETWORK_KINDS[kind]} on the job's nodes (peak {rate_text(network.peak)}), "
            f"SM active {_ratio(sm)}; {NVLINK_NOT_MEASURED}",
        )
    no_tensor = fp32 is not None and tensor is not None and tensor <= policy.tensor_idle_ratio
    if no_tensor and fp32 is not None and fp32 >= policy.fp32_busy_ratio:
        return Bottleneck(NO_TENSOR_CORES, f"FP32 pipe active {_ratio(fp32)}, tensor active {_ratio(tensor)}")
    if (
        occupancy is not None
        and sm is not None
        and occupancy < policy.occupancy_low_ratio
        and sm >= policy.occupancy_sm_active_ratio
    ):
        return Bottleneck(LOW_OCCUPANCY, f"SM occupancy {_ratio(occupancy)}, SM active {_ratio(sm)}")
    return Bottleneck(UNEXPLAINED, _looked_at(facts))


def _fastest(rates: Mapping[str, NodeRate], kinds: Mapping[str, str]) -> tuple[str, NodeRate | None]:
    """The kind of ``kinds`` with the highest mean rate, and that rate (None: no kind has one)."""
    found = sorted(((rate.mean, kind) for kind, rate in rates.items() if kind in kinds), reverse=True)
    return (found[0][1], rates[found[0][1]]) if found else ("", None)


def _looked_at(facts: JobFacts) -> str:
    """What an unexplained job showed, and what was not measured."""
    shown: list[str] = []
    missing: list[str] = []
    for name, label in (("sm_active", "SM active"), ("dram_active", "DRAM active"),
                        ("tensor_active", "tensor active"), ("fp32_active", "FP32 pipe active"),
                        ("sm_occupancy", "SM occupancy")):  # fmt: skip
        value = facts.mean(name)
        (shown if value is not None else missing).append(f"{label} {_ratio(value)}" if value is not None else label)
    for label, kinds in (("storage reads", READ_KINDS), ("InfiniBand", NETWORK_KINDS)):
        _, rate = _fastest(facts.node_rates, kinds)
        (shown if rate is not None else missing).append(f"{label} {rate_text(rate.mean)}" if rate else f"{label} rates")
    cv = facts.sawtooth()
    if cv is not None:
        shown.append(f"hourly SM activity CV {cv:.2f}")
    text = "nothing stood out: " + ", ".join(shown) if shown else "nothing stood out"
    missing.append("NVLink (the collector's /metrics only)")
    return f"{text}; not measured: {', '.join(missing)}"


def _ratio(value: float | None) -> str:
    """A ratio as the evidence shows it: two decimals (``0.71``); ``not measured`` for None."""
    return "not measured" if value is None else f"{value:.2f}"
