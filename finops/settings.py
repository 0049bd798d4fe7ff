"""Service settings, read from the environment (prefix ``FINOPS_``) by pydantic-settings.

The settings are grouped by subsystem, one class per group; :class:`Settings` is all of them together and is
what the service, the CLI and the dashboard read. Code that needs one group may take that group's class.

- :class:`StorageSettings` — database URL, data directory, raw-sample retention, requests' lock timeout.
- :class:`ApiSettings` — bearer tokens of the ingest API and the REST API.
- :class:`TlsSettings` — the certificate and private key `serve` speaks HTTPS with.
- :class:`IngestSettings` — per-node ingest limits (readings per second, burst, GPUs per batch and per node), body
  deadline, memory budget of request bodies.
- :class:`PricingSettings` — default pricing model and the price catalog file.
- :class:`IdleSettings` — when an allocated GPU counts as idle, and for how long before it is an idle episode.
- :class:`WasteSettings` — the thresholds and conventions of the waste reasons of idle GPUs.
- :class:`EfficiencySettings` — SM activity bands, busy-but-inefficient jobs and their bottleneck rules.
- :class:`SchedulerSettings` — how often the scheduler rolls up the ledger, and how long its job leases last.
- :class:`PrometheusPullSettings` — pulling dcgm-exporter telemetry from a Prometheus.
- :class:`TelemetrySettings` — where raw telemetry lives: the database, or a Prometheus-compatible TSDB.
- :class:`SacctSettings` — the scheduled Slurm job import with sacct.
- :class:`CollectorSettings` — what the service assumes of its collectors.
- :class:`DemoSettings` — where the demo and the tests find real third-party traces.
- :class:`AlertSettings` — alert rules file, Slack webhooks, SMTP, Alertmanagers, delivery.
- :class:`NudgeSettings` — per-user messages about wasteful jobs: thresholds, schedule, users' addresses.
- :class:`DashboardSettings` — the dashboard's log-in with an OpenID Connect provider, and groups → roles.

Every field is ``FINOPS_<NAME>`` in the environment, whichever group holds it. Secrets can also come from a
file: ``FINOPS_INGEST_TOKEN_FILE=/run/secrets/token`` reads the token from that file. Setting both the value and
the ``_FILE`` variant is an error. Secrets are never logged: they are :class:`pydantic.SecretStr`, shown as
``**********``. The Slack webhooks are a JSON object of name → URL
(``{"vision": "https://hooks.slack.com/services/…"}``), in the variable or in its file. The Alertmanagers alerts are
posted to are a JSON object of name → :class:`AlertmanagerTarget` whose credentials are files.
"""

from __future__ import annotations

import json
import re
import shlex
import typing
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from finops.analysis.waste import ReasonPolicy
from finops.ingest.limits import (
    BODY_MEMORY_BUDGET_BYTES,
    BODY_TIMEOUT_SECONDS,
    DEFAULT_RETENTION_DAYS,
    MAX_GPUS_PER_BATCH,
    MAX_GPUS_PER_NODE,
    READINGS_BURST,
    READINGS_PER_SECOND,
)
from finops.pricing.catalog import PricingModel
from finops.pricing.peaks import Precision
from finops.savings.efficiency_policy import EfficiencyPolicy
from finops.savings.nudges import NUDGE_KINDS

DEFAULT_DATA_DIR = Path("data")

DEFAULT_SACCT_SCHEDULE_SECONDS = 300
"""How often the scheduler imports Slurm jobs when ``FINOPS_SACCT_SCHEDULE_SECONDS`` is unset and sacct can be run."""

FILE_SUFFIX = "_file"
"""A field ``<name>_file`` beside a field ``<name>`` is the file that secret may be read from instead."""


def secret_file_fields(group: type[BaseSettings]) -> dict[str, str]:
    """The group's ``<name>_file`` fields, each → the secret field it holds the file of."""
    fields = group.model_fields
    return {
        f"{name}{FILE_SUFFIX}": name
        for name in fields
        if not name.endswith(FILE_SUFFIX) and f"{name}{FILE_SUFFIX}" in fields
    }


class SettingsGroup(BaseSettings):
    """What every group shares: the ``FINOPS_`` prefix and secrets read from ``*_FILE`` paths."""

    model_config = SettingsConfigDict(env_prefix="FINOPS_", extra="ignore", hide_input_in_errors=True)

    @model_validator(mode="after")
    def _secrets_from_files(self) -> typing.Self:
        fields = type(self).model_fields
        for file_field, name in secret_file_fields(type(self)).items():
            path: Path | None = getattr(self, file_field)
            variable = f"FINOPS_{name.upper()}"
            if getattr(self, name) is not None and path is not None:
                raise ValueError(f"set {variable} or {variable}_FILE, not both")
            if path is not None:
                try:
                    secret = path.read_text().strip()
                except OSError as exc:
                    raise ValueError(f"{variable}_FILE {path}: {exc.strerror}") from exc
                setattr(self, name, _secret(fields[name].annotation, secret, f"{variable}_FILE {path}"))
        return self


class StorageSettings(SettingsGroup):
    """Where the data is kept, for how long, and how long a request waits for a lock on it."""

    database_url: str = Field(
        "",
        description="SQLAlchemy URL; empty means `sqlite:///<data_dir>/gpu-finops.sqlite`. "
        "PostgreSQL: `postgresql+psycopg://user@host/db`.",
    )
    data_dir: Path = Field(
        DEFAULT_DATA_DIR, description="Directory for the embedded SQLite database and the demo's files."
    )
    sample_retention_days: int = Field(
        DEFAULT_RETENTION_DAYS,
        ge=1,
        description="Days of raw GPU samples kept (whole UTC days before today); `serve` and `scheduler` drop older "
        "ones daily. Hours still waiting for a ledger rebuild keep theirs. The ledger is kept.",
    )
    request_lock_timeout_seconds: float = Field(
        5.0,
        ge=0,
        description="PostgreSQL: longest a request of `serve` (ingest, REST API) waits for a lock another "
        "transaction holds (its `lock_timeout`); then `503` with `Retry-After`. `0`: wait without limit. The "
        "scheduled jobs are not bound by it. SQLite: not used (its write lock waits up to 60 s).",
    )

    @property
    def effective_database_url(self) -> str:
        """The configured URL, or the embedded SQLite file under ``data_dir``."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'gpu-finops.sqlite').resolve()}"

    @property
    def demo_database_url(self) -> str:
        """The SQLite file ``gpu-finops demo`` writes afresh on each run, apart from the site's own database:
        ``sqlite:///<data_dir>/demo.sqlite``."""
        return f"sqlite:///{(self.data_dir / 'demo.sqlite').resolve()}"


class ApiSettings(SettingsGroup):
    """Bearer tokens of the ingest API (collectors) and the REST API (people and programs)."""

    ingest_token: SecretStr | None = Field(
        None,
        description="Shared bearer token admitting every node's batches (opt-in, for small sites; warned of at start). "
        "Per-node tokens (`gpu-finops nodes token create`) admit one node's each.",
    )
    ingest_token_file: Path | None = Field(None, description="File holding the ingest token.")
    api_token: SecretStr | None = Field(
        None,
        description="A bearer token with the admin role for the REST API, `/metrics` and `/docs`, beside the role "
        "tokens of `gpu-finops api-token create`; never the ingest token (`serve` refuses to start when they are "
        "equal). With neither, those routes refuse every request, unless `serve --insecure-no-token` and no token "
        "of any kind exists.",
    )
    api_token_file: Path | None = Field(None, description="File holding the admin API token.")


class TlsSettings(SettingsGroup):
    """The certificate and private key `serve` speaks HTTPS with (both or neither; with neither, plain HTTP, which
    keeps tokens private only on loopback or behind a TLS-terminating reverse proxy)."""

    tls_cert_file: Path | None = Field(
        None,
        description="PEM certificate chain of `serve` (its own certificate first, then any intermediates); "
        "the same as `serve --tls-cert`.",
    )
    tls_key_file: Path | None = Field(
        None, description="PEM private key (unencrypted) of that certificate; the same as `serve --tls-key`."
    )


class IngestSettings(SettingsGroup):
    """Per-node limits of the ingest API (each service process enforces its own: with N replicas behind a load
    balancer a node may send up to N times the rate)."""

    ingest_readings_per_second: float = Field(
        READINGS_PER_SECOND,
        gt=0,
        description="Readings a node may send per second, on average (its token bucket's refill; Mimir's "
        "`ingestion_rate` default). A collector sends about 0.1 per GPU; over it: `429` with `Retry-After`. Counted "
        "per server process: under `serve --workers N` a node may get up to N times it.",
    )
    ingest_readings_burst: int = Field(
        READINGS_BURST,
        gt=0,
        description="Readings a node may send at once (its token bucket's size; Mimir's `ingestion_burst_size` "
        "default). A batch of more is refused with `422`: it could never pass.",
    )
    ingest_max_gpus_per_batch: int = Field(
        MAX_GPUS_PER_BATCH,
        gt=0,
        description="GPUs a batch may name (a batch is one node's: 8 on an HGX board); more: `422`.",
    )
    ingest_max_gpus_per_node: int = Field(
        MAX_GPUS_PER_NODE,
        gt=0,
        description="GPUs a node may have: ingest registers a new GPU only at an NVML index below this (16 on the "
        "largest boards); a GPU at a higher index is refused by itself (`422` naming it, the batch's other GPUs "
        "stored). Set it to your largest node's GPU count to bound what a stolen node token can invent.",
    )
    ingest_body_timeout_seconds: float = Field(
        BODY_TIMEOUT_SECONDS,
        gt=0,
        description="Seconds within which a request's body (ingest's and every other's) must be received once the "
        "service starts reading it; later: `408` and the connection closed.",
    )
    body_memory_budget_bytes: int = Field(
        BODY_MEMORY_BUDGET_BYTES,
        gt=0,
        description="Bytes of request bodies (ingest's and every other's, as received) a server process holds at "
        "once; a body past it: `503` with `Retry-After`. Per process: `serve --workers N` holds up to N times it.",
    )


class PricingSettings(SettingsGroup):
    """The pricing model and price catalog in force where no pricing rule says otherwise."""

    pricing_model: PricingModel = Field(
        PricingModel.ON_DEMAND, description="Pricing model of the GPUs of nodes no `prices assign` rule selects."
    )
    price_catalog: Path | None = Field(
        None,
        description="Price catalog YAML (effective-dated prices per GPU model); "
        "default: the packaged `finops/pricing/price_catalog.yaml`.",
    )


class IdleSettings(SettingsGroup):
    """When an allocated GPU is idle, and when an idle run is an idle episode."""

    idle_threshold_ratio: float = Field(0.05, ge=0, le=1, description="Utilisation at or below this is idle.")
    idle_window_seconds: int = Field(1800, gt=0, description="An idle run this long is an idle episode.")
    idle_max_gap_seconds: int = Field(
        150, gt=0, description="Two idle samples further apart than this break an idle run."
    )
    idle_grace_seconds: int = Field(
        600, ge=0, description="Seconds after a job starts during which a GPU is not judged idle (start-up)."
    )
    idle_partition_thresholds: dict[str, float] = Field(
        default_factory=dict,
        description='Idle threshold ratio per Slurm partition, JSON: `{"interactive": 0.01}`; others use the default.',
    )


_REASONS = ReasonPolicy()


def _comma_list(value: object) -> object:
    """``"finops-admins, sre"`` → ``["finops-admins", "sre"]`` (blank items dropped); anything else as it is."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


class WasteSettings(SettingsGroup):
    """Why idle GPUs are idle: the thresholds and conventions of the waste reasons (docs/waste-reasons.md)."""

    waste_low_utilization_ratio: float = Field(
        _REASONS.low_utilization_ratio,
        ge=0,
        le=1,
        description="A job whose mean utilisation is below this has its idle time given a reason (Job Defense "
        "Shield's example threshold, 25 %).",
    )
    waste_zero_utilization_ratio: float = Field(
        _REASONS.zero_utilization_ratio, ge=0, le=1, description="Over-requested: a GPU at most this over the job."
    )
    waste_busy_utilization_ratio: float = Field(
        _REASONS.busy_utilization_ratio,
        ge=0,
        le=1,
        description="Over-requested: while another GPU of the job averaged more than this.",
    )
    waste_storage_bytes_per_second: float = Field(
        _REASONS.storage_bytes_per_second,
        ge=0,
        description="Waiting on storage: the node's NFS, Lustre or disk reads or writes at this or more, bytes/s.",
    )
    waste_network_bytes_per_second: float = Field(
        _REASONS.network_bytes_per_second,
        ge=0,
        description="Waiting on the network: the node's InfiniBand traffic at this or more, bytes/s.",
    )
    waste_throttled_share: float = Field(
        _REASONS.throttled_share,
        gt=0,
        le=1,
        description="Throttled: this share of an episode's readings or more with a thermal or power clocks-event "
        "reason.",
    )
    waste_reduced_clock_ratio: float = Field(
        _REASONS.reduced_clock_ratio,
        gt=0,
        le=1,
        description="Throttled: with their SM clock at most this share of the GPU's highest in the day before.",
    )
    waste_interactive_partitions: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(_REASONS.interactive_partitions),
        description="Slurm partitions whose jobs are interactive sessions, comma-separated.",
    )
    waste_interactive_job_names: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(_REASONS.interactive_job_names),
        description="Job names of interactive sessions, comma-separated shell patterns (`*` any text; Open "
        "OnDemand's apps are `sys/dashboard/sys/<app>`).",
    )

    _interactive_lists = field_validator("waste_interactive_partitions", "waste_interactive_job_names", mode="before")(
        _comma_list
    )

    @property
    def reason_policy(self) -> ReasonPolicy:
        """The settings as the waste reasons take them."""
        return ReasonPolicy(
            low_utilization_ratio=self.waste_low_utilization_ratio,
            zero_utilization_ratio=self.waste_zero_utilization_ratio,
            busy_utilization_ratio=self.waste_busy_utilization_ratio,
            storage_bytes_per_second=self.waste_storage_bytes_per_second,
            network_bytes_per_second=self.waste_network_bytes_per_second,
            throttled_share=self.waste_throttled_share,
            reduced_clock_ratio=self.waste_reduced_clock_ratio,
            interactive_partitions=tuple(self.waste_interactive_partitions),
            interactive_job_names=tuple(self.waste_interactive_job_names),
        )


_EFFICIENCY = EfficiencyPolicy()


class EfficiencySettings(SettingsGroup):
    """SM activity bands and the busy-but-inefficient jobs' bottleneck rules (docs/efficiency.md). The band defaults
    are NVIDIA's DCGM guidance (user guide, "Profiling Metrics"): SM activity ≥ 0.8 is necessary for effective use,
    below 0.5 likely ineffective."""

    efficiency_effective_ratio: float = Field(
        _EFFICIENCY.effective_ratio,
        ge=0,
        le=1,
        description='SM activity at or above this is `effective` (DCGM: 0.8 is "necessary, but not sufficient, for '
        'effective use of the GPU").',
    )
    efficiency_ineffective_ratio: float = Field(
        _EFFICIENCY.ineffective_ratio,
        ge=0,
        le=1,
        description='SM activity below this is `ineffective` (DCGM: below 0.5 "likely indicates ineffective GPU '
        'usage"); from it up to the effective ratio, `moderate`.',
    )
    efficiency_busy_utilization_ratio: float = Field(
        _EFFICIENCY.busy_utilization_ratio,
        ge=0,
        le=1,
        description="Busy but inefficient: a job whose mean utilisation (kernel-busy time) is at least this while its "
        "SM activity is ineffective.",
    )
    efficiency_dram_high_ratio: float = Field(
        _EFFICIENCY.dram_high_ratio, ge=0, le=1, description="Memory-bound: DRAM active at least this …"
    )
    efficiency_tensor_low_ratio: float = Field(
        _EFFICIENCY.tensor_low_ratio, ge=0, le=1, description="Memory-bound: … with tensor active below this."
    )
    efficiency_storage_bytes_per_second: float = Field(
        _EFFICIENCY.storage_bytes_per_second,
        ge=0,
        description="Input-bound: the job's nodes' NFS, Lustre or disk reads at this or more, bytes/s …",
    )
    efficiency_sawtooth_cv: float = Field(
        _EFFICIENCY.sawtooth_cv,
        ge=0,
        description="Input-bound: … with the coefficient of variation of the job's hourly SM activity at least this …",
    )
    efficiency_sawtooth_min_hours: int = Field(
        _EFFICIENCY.sawtooth_min_hours, ge=2, description="Input-bound: … over at least this many measured hours."
    )
    efficiency_network_bytes_per_second: float = Field(
        _EFFICIENCY.network_bytes_per_second,
        ge=0,
        description="Communication-bound: the job's nodes' InfiniBand traffic at this or more, bytes/s (the waste "
        "reasons' default).",
    )
    efficiency_fp32_busy_ratio: float = Field(
        _EFFICIENCY.fp32_busy_ratio, ge=0, le=1, description="No tensor cores: FP32 pipe active at least this …"
    )
    efficiency_tensor_idle_ratio: float = Field(
        _EFFICIENCY.tensor_idle_ratio, ge=0, le=1, description="No tensor cores: … with tensor active at most this."
    )
    efficiency_occupancy_low_ratio: float = Field(
        _EFFICIENCY.occupancy_low_ratio, ge=0, le=1, description="Low occupancy: SM occupancy below this …"
    )
    efficiency_occupancy_sm_active_ratio: float = Field(
        _EFFICIENCY.occupancy_sm_active_ratio, ge=0, le=1, description="Low occupancy: … with SM active at least this."
    )

    @model_validator(mode="after")
    def _bands_in_order(self) -> typing.Self:
        if self.efficiency_effective_ratio < self.efficiency_ineffective_ratio:
            raise ValueError("FINOPS_EFFICIENCY_EFFECTIVE_RATIO must be at least FINOPS_EFFICIENCY_INEFFECTIVE_RATIO")
        return self

    @property
    def efficiency_policy(self) -> EfficiencyPolicy:
        """The settings as the efficiency report takes them."""
        return EfficiencyPolicy(
            **{name.removeprefix("efficiency_"): getattr(self, name) for name in EfficiencySettings.model_fields}
        )


class SchedulerSettings(SettingsGroup):
    """The scheduled ledger rollup (of `serve` and `scheduler`)."""

    rollup_interval_seconds: int = Field(
        300,
        gt=0,
        description="How often the scheduler rebuilds dirty ledger hours (and then evaluates the alert rules).",
    )
    job_lease_seconds: int = Field(
        30,
        ge=3,
        description="PostgreSQL: how long a scheduler's lease on a job lasts unless renewed (every third of it). "
        "Several `serve` or `scheduler` processes run each job once, on the lease holder; when the holder dies, "
        "another takes the job over within this plus a third of it. SQLite: not used (run one scheduler).",
    )


class PrometheusPullSettings(SettingsGroup):
    """Pulling dcgm-exporter telemetry from a Prometheus instead of (or beside) the collectors."""

    prometheus_url: str = Field(
        "",
        description="Prometheus to pull dcgm-exporter telemetry from every rollup interval; empty: no pull. "
        "Also where the dashboard reads the collectors' InfiniBand and storage throughput.",
    )
    prometheus_selector: str = Field("", description='Label matchers added to the pulled series, e.g. `{cluster="a"}`.')
    prometheus_step_seconds: int = Field(60, gt=0, description="Seconds between readings pulled from Prometheus.")
    mfu_precision: Precision = Field(
        "bf16_tensor",
        description="The datasheet peak model FLOPs utilisation divides by (`gpu-finops mfu`): `bf16_tensor` (LLM "
        "serving in BF16/FP16), `fp8_tensor` for FP8 models; any precision name of the price catalog's `peak_tflops`.",
    )


class TelemetrySettings(SettingsGroup):
    """Where raw GPU telemetry lives: in the database (``gpu_samples``), or in a Prometheus-compatible TSDB that the
    ledger and idle detection query by PromQL (docs/tsdb.md). The TSDB's series are selected and labelled as for the
    Prometheus pull (``FINOPS_PROMETHEUS_SELECTOR``, ``FINOPS_PROMETHEUS_STEP_SECONDS``)."""

    telemetry_source: Literal["database", "tsdb"] = Field(
        "database",
        description="`database`: readings are ingested into `gpu_samples`; `tsdb`: readings stay in the TSDB at "
        "`FINOPS_TSDB_URL`, the ingest API refuses them (409), `serve` starts without an ingest credential and the "
        "Prometheus pull does not run.",
    )
    tsdb_url: str = Field("", description="Base URL of the Prometheus-compatible TSDB (required with `tsdb`).")
    tsdb_discovery_lookback_seconds: int = Field(
        7 * 86400,
        gt=0,
        description="With `tsdb`: how far back the first rollup (an empty ledger) looks for GPUs in the TSDB; later "
        "rollups look from the ledger's newest hour.",
    )

    @model_validator(mode="after")
    def _tsdb_has_url(self) -> typing.Self:
        if self.telemetry_source == "tsdb" and not self.tsdb_url:
            raise ValueError("FINOPS_TELEMETRY_SOURCE=tsdb needs FINOPS_TSDB_URL (the TSDB's base URL)")
        return self


class SacctSettings(SettingsGroup):
    """The scheduled Slurm job import (`import sacct --run` on a timer)."""

    sacct_schedule_seconds: int | None = Field(
        None,
        ge=0,
        description="How often the scheduler imports Slurm jobs with sacct. Unset: every "
        f"{DEFAULT_SACCT_SCHEDULE_SECONDS} s when sacct can be run (`FINOPS_SACCT_COMMAND` is set, or its program "
        "is on the PATH), else not at all, which `serve` and `scheduler` log at start; `0`: never.",
    )
    sacct_command: str = Field(
        "sacct",
        description="sacct command, split like a shell command line, its last word the sacct program (`sacct`, "
        "`/opt/slurm/bin/sacct`, `ssh -F /etc/gpu-finops/sacct-ssh/config slurm-head sacct`); run as "
        "`env TZ=UTC SLURM_TIME_FORMAT=standard sacct …` there, so the times are UTC also over ssh.",
    )
    sacct_cluster: str = Field(
        "default",
        description="Cluster of the scheduled sacct import (watermark `sacct:<name>`); "
        "other than `default`, passed to sacct as `--clusters`.",
    )
    sacct_overlap_seconds: int = Field(
        600, ge=0, description="Each sacct run re-reads this much before the last run's end (late accounting records)."
    )
    sacct_lookback_seconds: int = Field(86400, gt=0, description="How far back the first sacct run reads.")
    sacct_timeout_seconds: float = Field(300.0, gt=0, description="A sacct run taking longer fails.")

    @field_validator("sacct_command")
    @classmethod
    def _sacct_words(cls, command: str) -> str:
        try:
            words = shlex.split(command)
        except ValueError as exc:
            raise ValueError(f"not a shell command line ({exc})") from None
        if not words:
            raise ValueError("empty: give the sacct command (e.g. `sacct`)")
        return command


class CollectorSettings(SettingsGroup):
    """What the service assumes of the collectors that send it readings."""

    collector_interval_seconds: float = Field(
        10.0,
        gt=0,
        description="Seconds between a collector's readings: a node silent 3 intervals fires `collector-silent` "
        "(with the Prometheus pull, set it to the pull interval).",
    )


class DemoSettings(SettingsGroup):
    """Real third-party data the demo replays and the tests read, in place."""

    shared_data: Path = Field(
        Path("../shared/data"), description="Folder of real third-party traces and captures (demo and tests)."
    )


class AlertmanagerTarget(BaseModel):
    """One Alertmanager that alerts are posted to (its API v2): the base URL (``https://am.example:9093``, with the
    route prefix if it has one), optional credentials read from files at each request (a bearer token, or a user
    name and a password file: HTTP basic auth; https only) and a PEM CA bundle its certificate is checked against.
    ValueError for a URL that is not http(s), or that carries credentials, a query or a fragment."""

    model_config = ConfigDict(extra="forbid")

    url: str
    bearer_token_file: Path | None = None
    username: str | None = None
    password_file: Path | None = None
    ca_file: Path | None = None

    @field_validator("url")
    @classmethod
    def _plain_base_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("an Alertmanager URL is http:// or https:// and a host")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError("an Alertmanager URL has no credentials, query or fragment (credentials are files)")
        return value

    @model_validator(mode="after")
    def _one_credential_over_tls(self) -> typing.Self:
        if self.bearer_token_file is not None and (self.username is not None or self.password_file is not None):
            raise ValueError("set bearer_token_file or username and password_file, not both")
        if (self.username is None) != (self.password_file is None):
            raise ValueError("basic auth needs both username and password_file")
        credentials = self.bearer_token_file is not None or self.password_file is not None
        if credentials and urlsplit(self.url).scheme != "https":
            raise ValueError("credentials are sent to an https Alertmanager URL only")
        return self


class AlertSettings(SettingsGroup):
    """Alert rules, Slack, e-mail and Alertmanager channels, and the delivery worker."""

    alert_rules: Path | None = Field(
        None, description="YAML file of alert rules and routes (format: `docs/alerts.md`); default: the rules in code."
    )
    alert_slack_webhooks: dict[str, SecretStr] | None = Field(
        None, description='Slack incoming webhooks by name, JSON: `{"vision": "https://hooks.slack.com/services/…"}`.'
    )
    alert_slack_webhooks_file: Path | None = Field(None, description="File holding the Slack webhooks JSON object.")
    alert_webhook_hosts: list[str] = Field(
        default_factory=lambda: ["hooks.slack.com"], description="Host names webhooks may point to (JSON list)."
    )
    alert_webhook_allow_private: bool = Field(
        False, description="Allow webhooks on loopback, link-local or private addresses (and plain http there)."
    )
    alert_alertmanagers: dict[str, AlertmanagerTarget] = Field(
        default_factory=dict,
        description='Alertmanagers by name, JSON: `{"site": {"url": "https://am.example:9093"}}`; each may add '
        "`bearer_token_file`, or `username` and `password_file`, and `ca_file` (`docs/alerts.md`).",
    )
    alert_smtp_host: str = Field("", description="SMTP server for alert e-mail; empty: e-mail deliveries are refused.")
    alert_smtp_port: int = Field(587, gt=0, lt=65536, description="SMTP port (587 STARTTLS, 465 implicit TLS).")
    alert_smtp_tls: Literal["starttls", "implicit", "none"] = Field(
        "starttls", description="`starttls` (required), `implicit`, or `none` (a local relay; no credentials sent)."
    )
    alert_smtp_sender: str = Field("gpu-finops@localhost", description="From address of alert e-mail.")
    alert_smtp_username: str | None = Field(None, description="SMTP AUTH user name.")
    alert_smtp_password: SecretStr | None = Field(None, description="SMTP AUTH password.")
    alert_smtp_password_file: Path | None = Field(None, description="File holding the SMTP password.")
    alert_smtp_ca_file: Path | None = Field(
        None, description="PEM CA bundle the SMTP server's certificate is checked against; default: system store."
    )
    alert_dashboard_url: str = Field(
        "http://127.0.0.1:8501", description="Base URL of the dashboard, for the links in alert messages."
    )
    alert_delivery_poll_seconds: float = Field(
        5.0, gt=0, description="How often the delivery worker sends due messages (and dispatches due groups)."
    )
    alert_delivery_deadline_seconds: int = Field(
        3600, gt=0, description="A message not delivered this long after it was queued is recorded as failed."
    )
    alert_outbox_retention_days: int = Field(
        90,
        ge=1,
        le=3660,
        description="Days the alert outbox keeps a delivered, failed or refused message (`alerts deliveries`, "
        "`alerts retry`) before the scheduler removes it; pending messages are kept.",
    )

    @property
    def slack_webhooks(self) -> dict[str, SecretStr]:
        """The configured Slack webhooks by name (empty when none)."""
        return dict(self.alert_slack_webhooks or {})


_DOMAIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+")


def email_domain(value: str) -> str:
    """An e-mail domain without a leading ``@`` (``"@example.edu"`` and ``"example.edu"`` are alike); ValueError for
    text that is not a domain name. Empty stays empty (no domain)."""
    domain = value.strip().removeprefix("@")
    if domain and not _DOMAIN.fullmatch(domain):
        raise ValueError(f"{value!r} is not a domain name such as example.edu")
    return domain


class NudgeSettings(SettingsGroup):
    """Nudges: messages to the users whose jobs waste GPUs, with the jobs, their cost and the fix, sent through the
    alert outbox (docs/nudges.md). Defaults are Princeton's Job Defense Shield's (JDS), cited per setting."""

    nudge_schedule_seconds: int = Field(
        3600,
        ge=0,
        description="How often `serve` and `scheduler` look for nudges due (and queue them); 0: not scheduled "
        "(`gpu-finops nudges` still sends on demand).",
    )
    nudge_kinds: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(NUDGE_KINDS),
        description="The kinds of nudge sent, comma-separated: " + ", ".join(f"`{k}`" for k in NUDGE_KINDS) + ".",
    )
    nudge_period_days: float = Field(
        7, gt=0, description="Days of the ledger the nudges about finished work read (JDS `--days`, default 7)."
    )
    nudge_repeat_days: float = Field(
        7,
        gt=0,
        description="A user gets at most one message per kind of nudge this often (JDS: one e-mail per user and "
        "alert every `--days`, default 7).",
    )
    nudge_idle_running_minutes: int = Field(
        60,
        gt=0,
        description="`idle-running-job`: a running job with a GPU idle (`FINOPS_IDLE_THRESHOLD_RATIO`) this long "
        "(JDS cancel-zero-gpu-jobs `first_warning_minutes: 60`).",
    )
    nudge_zero_util_gpu_hours: float = Field(
        24,
        ge=0,
        description="`zero-util-gpu-hours`: a user's GPU-hours at 0 % over the period from which they are told "
        "(JDS zero-util-gpu-hours `gpu_hours_threshold_user: 24`).",
    )
    nudge_low_efficiency_ratio: float = Field(
        0.25,
        ge=0,
        le=1,
        description="`low-gpu-efficiency`: a user's mean GPU utilisation over the period at or below this "
        "(JDS low-gpu-efficiency `eff_thres_pct: 25`).",
    )
    nudge_low_efficiency_gpu_hours: float = Field(
        50,
        ge=0,
        description="`low-gpu-efficiency`: … over more than this many GPU-hours (JDS `absolute_thres_hours: 50`).",
    )
    nudge_mig_max_utilization_ratio: float = Field(
        0.20,
        ge=0,
        le=1,
        description="`mig-candidate`: a one-GPU job with a mean utilisation above 0 and at or below this "
        "(JDS gpu-model-too-powerful `gpu_util_threshold: 20`).",
    )
    nudge_mig_max_memory_gib: float = Field(
        10,
        gt=0,
        description="`mig-candidate`: … whose memory peak is at most this many GiB "
        "(JDS gpu-model-too-powerful `gpu_mem_usage_max: 10`, GB of 1024³ bytes).",
    )
    nudge_inefficient_gpu_hours: float = Field(
        24,
        ge=0,
        description="`busy-but-inefficient`: a user's GPU-hours of busy-but-inefficient jobs (utilisation and SM "
        "activity: `FINOPS_EFFICIENCY_*`) over the period from which they are told (as `zero-util-gpu-hours`'s "
        "default: a day of one GPU; no JDS counterpart).",
    )
    nudge_email_domain: str = Field(
        "",
        description="E-mail domain of users not in the recipients file: user `alice` is `alice@<domain>` "
        "(JDS `email-domain-name`); empty: none.",
    )
    nudge_recipients: Path | None = Field(
        None,
        description="YAML file of users' own addresses (e-mail, Slack webhook and member ID) and of the targets "
        "every nudge is copied to (format: `docs/nudges.md`).",
    )

    @field_validator("nudge_kinds", mode="before")
    @classmethod
    def _kinds(cls, value: object) -> object:
        """``"zero-util-gpu-hours, mig-candidate"`` → a list; each must be a kind of nudge."""
        kinds = [item.strip() for item in value.split(",") if item.strip()] if isinstance(value, str) else value
        for kind in kinds if isinstance(kinds, list) else []:
            if kind not in NUDGE_KINDS:
                raise ValueError(f"{kind!r} is not a kind of nudge ({', '.join(NUDGE_KINDS)})")
        return kinds

    @field_validator("nudge_email_domain")
    @classmethod
    def _domain(cls, value: str) -> str:
        return email_domain(value)


class DashboardSettings(SettingsGroup):
    """Log-in to the dashboard with the site's OpenID Connect provider (Keycloak, Okta, Entra ID, Dex, …) and the
    groups of the ID token that make someone a viewer, an admin or one team's member. Without a provider, the
    dashboard has no log-in and listens on loopback only."""

    dashboard_url: str = Field(
        "",
        description="Base URL people open the dashboard at (`https://finops.example.org`); with OIDC, the provider "
        "sends them back to `<this>/oauth2callback`, the redirect URI to register for the client.",
    )
    dashboard_oidc_metadata_url: str = Field(
        "",
        description="The provider's discovery document, `<issuer>/.well-known/openid-configuration`; empty: no "
        "log-in, and `dashboard` listens on loopback only.",
    )
    dashboard_oidc_client_id: str = Field("", description="Client ID of the dashboard at the provider.")
    dashboard_oidc_client_secret: SecretStr | None = Field(None, description="Client secret of the dashboard.")
    dashboard_oidc_client_secret_file: Path | None = Field(None, description="File holding the client secret.")
    dashboard_oidc_scopes: str = Field(
        "openid email profile",
        description="Scopes asked for, space-separated; add the one that puts the groups claim in the ID token "
        "where the provider needs one (Okta: `groups`).",
    )
    dashboard_oidc_prompt: str = Field(
        "select_account",
        description="OIDC `prompt` of the log-in request (Streamlit's default); `login` or `consent` for providers "
        "that refuse `select_account`.",
    )
    dashboard_oidc_groups_claim: str = Field(
        "groups", description="ID-token claim holding the person's groups (a list of names, or one name)."
    )
    dashboard_admin_groups: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Groups whose members are `admin` (sees every team)."
    )
    dashboard_viewer_groups: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Groups whose members are `viewer` (sees every team)."
    )
    dashboard_team_group_prefix: str = Field(
        "team:",
        description="A group named this prefix and a team (`team:vision`) makes its members `team` role of that "
        "team: they see only its costs. Someone in the groups of two teams and no viewer or admin group is refused.",
    )
    dashboard_cookie_secret: SecretStr | None = Field(
        None,
        description="Key signing the log-in cookie; default: a random one at each start (everyone logs in again "
        "after a restart; set it when several dashboard replicas share a load balancer).",
    )
    dashboard_cookie_secret_file: Path | None = Field(None, description="File holding the cookie secret.")

    _group_lists = field_validator("dashboard_admin_groups", "dashboard_viewer_groups", mode="before")(_comma_list)

    @property
    def oidc_enabled(self) -> bool:
        """Whether the dashboard requires a log-in (``FINOPS_DASHBOARD_OIDC_METADATA_URL`` is set)."""
        return bool(self.dashboard_oidc_metadata_url)

    @property
    def redirect_uri(self) -> str:
        """``<FINOPS_DASHBOARD_URL>/oauth2callback``, where the provider sends people back after they log in."""
        return f"{self.dashboard_url.rstrip('/')}/oauth2callback"


class Settings(
    StorageSettings,
    ApiSettings,
    TlsSettings,
    IngestSettings,
    PricingSettings,
    IdleSettings,
    WasteSettings,
    EfficiencySettings,
    SchedulerSettings,
    PrometheusPullSettings,
    TelemetrySettings,
    SacctSettings,
    CollectorSettings,
    DemoSettings,
    AlertSettings,
    NudgeSettings,
    DashboardSettings,
):
    """All service settings, every group's. Each field is ``FINOPS_<NAME>`` in the environment."""


GROUPS: tuple[type[SettingsGroup], ...] = tuple(
    group for group in Settings.__bases__ if issubclass(group, SettingsGroup)
)
"""The settings groups, in the order they are documented (the order of :class:`Settings`' bases)."""


def _secret(annotation: Any, text: str, where: str) -> object:
    """A secret read from a file, as its field's type: a JSON object of name → secret, or one secret."""
    kinds = typing.get_args(annotation) or (annotation,)
    if any(typing.get_origin(kind) is dict for kind in kinds):
        return _webhooks(text, where)
    return SecretStr(text)


def _webhooks(text: str, where: str) -> dict[str, SecretStr]:
    """A JSON object of webhook name → URL, as secrets. ValueError naming ``where`` (never the content)."""
    try:
        found: Any = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{where}: not a JSON object of name → URL (line {getattr(exc, 'lineno', '?')})") from None
    if not isinstance(found, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
        raise ValueError(f"{where}: not a JSON object of name → URL")
    return {name: SecretStr(url) for name, url in found.items()}
