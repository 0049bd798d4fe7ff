"""Why GPUs are wasted: the probable reason of an idle episode, and of the idle time of a job whose mean utilisation
is low, each with the evidence that showed it ("2.1 GB/s Lustre reads during the episode").

The rules (:data:`RULES`) are tried in order and the first that holds is the reason:

1. **no reading**: the job's GPU time has no reading at all (the ledger's unmetered hours): nothing can be judged.
2. **over-requested**: the GPU stayed at ~0 % over the whole job (so far) while another GPU of the job was busy:
   the job asked for more GPUs than it used. A fact of the job, and its fix is plain (ask for fewer).
3. **throttled**: most of the readings carried a thermal or power clocks-event reason with the SM clock held below
   what the GPU ran at before. A fault of the machine, not of its user: stated before anything the user could fix.
4. **waiting on storage**: the node read or wrote NFS, Lustre or local disks fast while the GPU idled (loading a
   dataset, writing a checkpoint). Before the network, because Lustre over ``o2ib`` and NFS over RDMA move their
   bytes over the InfiniBand ports too: the same traffic shows in both.
5. **waiting on the network**: InfiniBand traffic while the GPU idled (a collective waiting for a straggler, data
   fetched from peers).
6. **interactive session left open**: the job is interactive by the site's conventions (a partition, a job name:
   ``jupyter*``, Open OnDemand's ``sys/dashboard/...``, ``srun --pty bash``'s ``bash``, ``interactive``).
7. **stalled process**: GPU memory held (more than 64 MiB, :data:`MEMORY_HELD_BYTES`) with no
   compute: a process that allocated and stopped (a hang, a deadlock, a debugger, a sleeping loop).
8. **unexplained**: none of the above; the evidence says what was looked at.

An idle episode is judged when it is stored (:func:`finops.analysis.idle.detect_idle`) on its own readings: the
clocks-event reasons and SM clocks of its readings (:mod:`finops.analysis.episode_evidence`), the node's fabric and
storage rates of its hours (:mod:`finops.ingest.node_io`), the memory it held, the job's partition and name, and the
ledger's utilisation of the job's GPUs so far. Its reason and evidence are stored with it, so they outlive the raw
readings.

A job's idle time outside its episodes (:func:`judge_job_gpu`) is judged from what outlives the readings: the
ledger's utilisation of its GPUs, its stored episodes' reasons and its conventions; only a job whose mean
utilisation is below :attr:`ReasonPolicy.low_utilization_ratio` gets a reason (over-requested GPUs excepted, which
are waste whatever the job's mean).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field

from finops.db.models import EVIDENCE_MAX_LENGTH
from finops.ingest.node_io import NodeRate

NO_READING = "no_reading"
OVER_REQUESTED = "over_requested"
THROTTLED = "throttled"
WAITING_ON_STORAGE = "waiting_on_storage"
WAITING_ON_NETWORK = "waiting_on_network"
INTERACTIVE = "interactive"
STALLED_PROCESS = "stalled_process"
UNEXPLAINED = "unexplained"
BUSY_JOB = "busy_job"
"""Not a reason: the idle time of jobs whose mean utilisation is at or above the low-utilisation threshold, outside
their idle episodes (the idle share of jobs that work), kept apart in the cost by reason so that it adds up."""

REFERENCE_CLOCK_SECONDS = 86_400
"""How far back before an episode's end the GPU's highest SM clock is looked for (its unthrottled clock)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One waste reason: its key (stored in ``idle_episodes.reason``), its title as people read it, when it holds
    (``condition``, with ``{name}`` fields of :meth:`ReasonPolicy.figures`) and where its data and thresholds come
    from (``source``)."""

    reason: str
    title: str
    condition: str
    source: str


RULES: tuple[Rule, ...] = (
    Rule(
        NO_READING,
        "no reading",
        "the job's GPU-hours have no reading (the ledger's unmetered hours)",
        "`ledger.sample_count` = 0 for a GPU-hour a job held: no collector or pull reading reached the service. Its "
        "cost is allocated cost, not idle cost: whether the GPU worked is unknown.",
    ),
    Rule(
        OVER_REQUESTED,
        "over-requested",
        "the GPU's mean utilisation over the whole job (so far) is at most {zero_utilization}, and another GPU of "
        "the job averaged more than {busy_utilization}",
        "the ledger's utilisation per GPU of the job (used ÷ metered GPU-seconds). ~0 % is at most "
        "{zero_utilization}: NVML reports whole percents and a GPU nobody uses reads 0 with a stray 1; busy is "
        "above the default idle threshold (5 %). Job Defense Shield alerts on jobs with a GPU at 0 % the same way.",
    ),
    Rule(
        THROTTLED,
        "throttled",
        "at least {throttled_share} of the readings carry a thermal (`sw_thermal`, `hw_thermal`, `hw_slowdown`) or "
        "power (`sw_power_cap`, `hw_power_brake`) clocks-event reason, and their mean SM clock is at most "
        "{reduced_clock} of the highest the GPU reported in the 24 h before the episode ended",
        "`gpu_samples.clocks_event_reasons` (NVML `nvmlClocksEventReason*` bits, the same as DCGM's) and "
        "`sm_clock_hertz`. Boost clocks wander by a few percent; thermal and power slowdowns cut tens of percent.",
    ),
    Rule(
        WAITING_ON_STORAGE,
        "waiting on storage",
        "the node read or wrote NFS, Lustre or local disks at {storage} or more, mean over the episode's hours",
        "the collector's `node_io` rates (NFS mountstats, Lustre llite stats, /proc/diskstats) per node and hour. "
        "{storage} is an order of magnitude above a node's background (logs, package caches: a few MB/s) and a "
        "tenth of one 10 GbE NFS link: the node is moving a dataset or a checkpoint.",
    ),
    Rule(
        WAITING_ON_NETWORK,
        "waiting on the network",
        "the node received or sent {network} or more over InfiniBand, mean over the episode's hours",
        "the collector's `node_io` rates (sysfs `port_rcv_data`/`port_xmit_data`) per node and hour. {network} is "
        "far above subnet management traffic (kB/s) and well below one HDR port (25 GB/s): the node exchanges data "
        "while its GPU waits.",
    ),
    Rule(
        INTERACTIVE,
        "interactive session left open",
        "the job's partition is one of {interactive_partitions}, or its name matches one of {interactive_job_names}",
        "Slurm `Partition` and `JobName` (a pod's name): the site's conventions, `FINOPS_WASTE_INTERACTIVE_*`. "
        "Defaults: the job name `interactive` and Open OnDemand's `sys/dashboard/sys/<app>`, which Princeton's "
        "jobstats takes for interactive jobs; `srun --pty bash` shells; JupyterHub's `jupyter-<user>` pods.",
    ),
    Rule(
        STALLED_PROCESS,
        "stalled process",
        "GPU memory is held (more than 64 MiB in use) while the GPU does no compute",
        "`gpu_samples.memory_used_bytes` of the episode's readings: a process allocated memory and stopped "
        "launching kernels (a hang, a deadlock, a debugger, a sleeping loop).",
    ),
    Rule(
        UNEXPLAINED,
        "unexplained",
        "none of the above",
        "the evidence names what was looked at (storage and network rates, throttling, memory).",
    ),
)
"""The waste reasons in precedence order: the first whose condition holds is an episode's or job's reason."""

REASONS: dict[str, Rule] = {rule.reason: rule for rule in RULES}
"""Reason key → its rule."""

STORAGE_KINDS: dict[str, str] = {
    "lustre_read": "Lustre reads",
    "lustre_written": "Lustre writes",
    "nfs_read": "NFS reads",
    "nfs_written": "NFS writes",
    "disk_read": "local disk reads",
    "disk_written": "local disk writes",
}
"""The ``node_io`` kinds that are storage traffic, with how the evidence names them."""
NETWORK_KINDS: dict[str, str] = {
    "infiniband_received": "InfiniBand traffic received",
    "infiniband_transmitted": "InfiniBand traffic sent",
}
"""The ``node_io`` kinds that are fabric traffic, with how the evidence names them."""


@dataclass(frozen=True, slots=True)
class ReasonPolicy:
    """The thresholds and conventions of the rules (:data:`RULES`). Ratios are 0..1, rates bytes per second.

    ``low_utilization_ratio``: a job whose mean utilisation is below it has its idle time judged (Job Defense Shield's
    example ``eff_thres_pct: 25``); ``zero_utilization_ratio`` and ``busy_utilization_ratio``: ~0 % and busy for
    over-requested; ``storage_bytes_per_second``, ``network_bytes_per_second``: waiting on storage, on the network;
    ``throttled_share`` and ``reduced_clock_ratio``: throttled; ``interactive_partitions`` and
    ``interactive_job_names`` (shell-style patterns, ``*`` any text): interactive."""

    low_utilization_ratio: float = 0.25
    zero_utilization_ratio: float = 0.01
    busy_utilization_ratio: float = 0.05
    storage_bytes_per_second: float = 1e8
    network_bytes_per_second: float = 1e8
    throttled_share: float = 0.5
    reduced_clock_ratio: float = 0.9
    interactive_partitions: tuple[str, ...] = ("interactive",)
    interactive_job_names: tuple[str, ...] = ("interactive", "bash", "sh", "zsh", "jupyter*", "*sys/dashboard/*")

    def figures(self) -> dict[str, str]:
        """The thresholds as the rules' texts show them: ``{"storage": "100 MB/s", "zero_utilization": "1 %", …}``."""
        return {
            "zero_utilization": _percent(self.zero_utilization_ratio),
            "busy_utilization": _percent(self.busy_utilization_ratio),
            "throttled_share": _percent(self.throttled_share),
            "reduced_clock": _percent(self.reduced_clock_ratio),
            "storage": rate_text(self.storage_bytes_per_second),
            "network": rate_text(self.network_bytes_per_second),
            "interactive_partitions": ", ".join(f"`{p}`" for p in self.interactive_partitions) or "(none)",
            "interactive_job_names": ", ".join(f"`{n}`" for n in self.interactive_job_names) or "(none)",
        }

    def interactive(self, partition: str, job_name: str) -> str | None:
        """Why a job of ``partition`` named ``job_name`` is interactive ("partition interactive", "job name
        jupyter-alice matches jupyter*"), or None."""
        if partition in self.interactive_partitions:
            return f"partition {partition}"
        pattern = next((p for p in self.interactive_job_names if fnmatch.fnmatchcase(job_name, p)), None)
        if pattern is None:
            return None
        return f"job name {job_name}" + ("" if pattern == job_name else f" matches {pattern}")


def rule_table(policy: ReasonPolicy = ReasonPolicy()) -> str:
    """The rules as a Markdown table (precedence, reason, when it holds, data and source) with ``policy``'s
    thresholds: the table of docs/waste-reasons.md."""
    figures = policy.figures()
    lines = ["| # | reason | when it holds | data and source |", "|---|---|---|---|"]
    for number, rule in enumerate(RULES, start=1):
        condition, source = rule.condition.format(**figures), rule.source.format(**figures)
        lines.append(f"| {number} | **{rule.title}** (`{rule.reason}`) | {condition} | {source} |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class Verdict:
    """A reason (a key of :data:`REASONS`) and the evidence for it, one line of text."""

    reason: str
    evidence: str

    @property
    def title(self) -> str:
        """The reason as people read it ("waiting on storage")."""
        return REASONS[self.reason].title

    def sentence(self) -> str:
        """ "probably waiting on storage: 2.1 GB/s Lustre reads during the episode"."""
        return f"probably {self.title}: {self.evidence}"


@dataclass(frozen=True, slots=True)
class EpisodeFacts:
    """What is known of a GPU during one of its idle episodes.

    ``partition``, ``job_name``: the job's; ``gpu_mean``: the GPU's mean utilisation over the job's metered time so
    far (ledger; None: none metered), ``sibling_mean``: the busiest other GPU's of the job (None: no other metered);
    ``memory_bytes``: the most memory in use during the episode; ``readings``: the episode's readings,
    ``thermal_readings``, ``power_readings``, ``throttled_readings`` (either) and their mean ``throttled_sm_clock``
    (Hz);
    ``reference_sm_clock``: the highest SM clock of the GPU in the day before the episode ended (None: not read,
    or no clock); ``node_rates``: the node's rates over the episode by kind (:func:`finops.ingest.node_io.node_rates`).
    """

    partition: str = ""
    job_name: str = ""
    gpu_mean: float | None = None
    sibling_mean: float | None = None
    memory_bytes: float = 0.0
    readings: int = 0
    thermal_readings: int = 0
    power_readings: int = 0
    throttled_readings: int = 0
    throttled_sm_clock: float | None = None
    reference_sm_clock: float | None = None
    node_rates: Mapping[str, NodeRate] = field(default_factory=dict)

    def throttled_share(self) -> float:
        """Share of the episode's readings with a thermal or power reason (0 without readings)."""
        return self.throttled_readings / self.readings if self.readings else 0.0


MEMORY_HELD_BYTES = 64 * 2**20
"""Memory in use above this (64 MiB) during an episode means a process still holds the GPU."""


def judge_episode(facts: EpisodeFacts, policy: ReasonPolicy) -> Verdict:
    """The reason of an idle episode: the first rule of :data:`RULES` its ``facts`` meet (``no reading`` never: an
    episode is made of readings)."""
    over = _over_requested(facts.gpu_mean, facts.sibling_mean, policy, "the whole job so far")
    if over is not None:
        return over
    if facts.throttled_share() >= policy.throttled_share and _reduced(facts, policy):
        kinds = " and ".join(k for k, n in (("thermal", facts.thermal_readings), ("power", facts.power_readings)) if n)
        clock = facts.throttled_sm_clock or 0.0
        return Verdict(
            THROTTLED,
            f"{kinds} clocks-event reasons on {_percent(facts.throttled_share())} of the readings, SM clock "
            f"{clock / 1e6:,.0f} MHz against {(facts.reference_sm_clock or 0.0) / 1e6:,.0f} MHz before",
        )
    traffic: tuple[tuple[str, Mapping[str, str], float], ...] = (
        (WAITING_ON_STORAGE, STORAGE_KINDS, policy.storage_bytes_per_second),
        (WAITING_ON_NETWORK, NETWORK_KINDS, policy.network_bytes_per_second),
    )
    for reason, names, threshold in traffic:
        kind, rate = _fastest(facts.node_rates, names)
        if rate is not None and rate.mean >= threshold:
            return Verdict(
                reason,
                f"{rate_text(rate.mean)} {names[kind]} during the episode (node-wide, peak {rate_text(rate.peak)})",
            )
    interactive = policy.interactive(facts.partition, facts.job_name)
    if interactive is not None:
        return Verdict(INTERACTIVE, f"interactive by convention: {interactive}")
    if facts.memory_bytes > MEMORY_HELD_BYTES:
        return Verdict(STALLED_PROCESS, f"{facts.memory_bytes / 2**30:,.1f} GiB of GPU memory held with no compute")
    return Verdict(UNEXPLAINED, _looked_at(facts))


def _over_requested(
    gpu_mean: float | None, sibling_mean: float | None, policy: ReasonPolicy, over: str
) -> Verdict | None:
    if gpu_mean is None or sibling_mean is None:
        return None
    if gpu_mean <= policy.zero_utilization_ratio and sibling_mean > policy.busy_utilization_ratio:
        return Verdict(
            OVER_REQUESTED,
            f"this GPU at {_percent(gpu_mean)} over {over} while another GPU of the job averaged "
            f"{_percent(sibling_mean)}",
        )
    return None


def _reduced(facts: EpisodeFacts, policy: ReasonPolicy) -> bool:
    """Whether the throttled readings' SM clock is held below the GPU's earlier clock."""
    if facts.throttled_sm_clock is None or not facts.reference_sm_clock:
        return False
    return facts.throttled_sm_clock <= policy.reduced_clock_ratio * facts.reference_sm_clock


def _fastest(rates: Mapping[str, NodeRate], kinds: Mapping[str, str]) -> tuple[str, NodeRate | None]:
    """The kind of ``kinds`` with the highest mean rate, and that rate (None: no kind has one)."""
    found = [(rate.mean, kind) for kind, rate in rates.items() if kind in kinds]
    if not found:
        return "", None
    _, kind = max(found)
    return kind, rates[kind]


def _looked_at(facts: EpisodeFacts) -> str:
    """What an unexplained episode showed, for its evidence."""
    parts = []
    for label, kinds in (("storage", STORAGE_KINDS), ("InfiniBand", NETWORK_KINDS)):
        _, rate = _fastest(facts.node_rates, kinds)
        parts.append(f"{label} {rate_text(rate.mean)}" if rate is not None else f"no {label} rates")
    if facts.readings and facts.throttled_sm_clock is not None:
        parts.append(f"throttled on {_percent(facts.throttled_share())} of the readings")
    else:
        parts.append("no throttling")
    parts.append("no memory held")
    return "nothing stood out: " + ", ".join(parts)


@dataclass(frozen=True, slots=True)
class JobGpuFacts:
    """What outlives the readings of one GPU of a job: ``job_mean``, the job's mean utilisation over its metered
    GPU-seconds (None: none metered); ``gpu_mean`` and ``sibling_mean`` as in :class:`EpisodeFacts`;
    ``episodes``: the job's stored idle episodes' reasons → (their GPU-seconds, the evidence of the longest)."""

    partition: str = ""
    job_name: str = ""
    job_mean: float | None = None
    gpu_mean: float | None = None
    sibling_mean: float | None = None
    episodes: Mapping[str, tuple[float, str]] = field(default_factory=dict)


def judge_job_gpu(facts: JobGpuFacts, policy: ReasonPolicy) -> Verdict | None:
    """The reason of a job's idle time on one GPU outside its idle episodes, or None when the job is busy (mean
    utilisation at or above :attr:`ReasonPolicy.low_utilization_ratio`: not waste to explain).

    Over-requested first (a GPU left at ~0 % is waste whatever the job's mean); no reading when none of the job's
    time was metered; then the reason of the job's idle episodes that covered the most GPU-time (they were judged on
    the readings); then interactive by convention; else unexplained."""
    over = _over_requested(facts.gpu_mean, facts.sibling_mean, policy, "the whole job")
    if over is not None:
        return over
    if facts.job_mean is None:
        return Verdict(NO_READING, "no reading of the job's GPUs reached the service")
    if facts.job_mean >= policy.low_utilization_ratio:
        return None
    low = f"mean utilisation {_percent(facts.job_mean)}"
    if facts.episodes:
        total = sum(seconds for seconds, _ in facts.episodes.values())
        reason, (seconds, example) = max(facts.episodes.items(), key=lambda item: (item[1][0], item[0]))
        return Verdict(
            reason,
            f"{low}; its idle episodes: {seconds / 3600:,.1f} of {total / 3600:,.1f} GPU-h {REASONS[reason].title}"
            f" ({example})",
        )
    interactive = policy.interactive(facts.partition, facts.job_name)
    if interactive is not None:
        return Verdict(INTERACTIVE, f"{low}, interactive by convention: {interactive}")
    return Verdict(UNEXPLAINED, f"{low}, no idle episode long enough to read a reason from")


def bounded_evidence(text: str) -> str:
    """``text`` cut to :data:`finops.db.models.EVIDENCE_MAX_LENGTH` characters (an ellipsis marking a cut)."""
    return text if len(text) <= EVIDENCE_MAX_LENGTH else text[: EVIDENCE_MAX_LENGTH - 1] + "…"


def rate_text(bytes_per_second: float) -> str:
    """Bytes per second in decimal units, as storage and network speeds are quoted: ``2.1 GB/s``, ``350 MB/s``."""
    value, unit = bytes_per_second, "B/s"
    for larger in ("kB/s", "MB/s", "GB/s", "TB/s"):
        if value < 1000:
            break
        value, unit = value / 1000, larger
    return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"


def _percent(ratio: float) -> str:
    """A ratio in percent: whole from 10 % up, one decimal below (``0.4 %``), no ``.0``."""
    text = f"{ratio * 100:.0f}" if ratio >= 0.1 else f"{ratio * 100:.1f}".removesuffix(".0")
    return f"{text} %"
