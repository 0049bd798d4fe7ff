"""Settings of the service's own running: its storage, API tokens, TLS, ingest limits and scheduler."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr

from finops.ingest.limits import (
    BODY_MEMORY_BUDGET_BYTES,
    BODY_TIMEOUT_SECONDS,
    DEFAULT_RETENTION_DAYS,
    MAX_GPUS_PER_BATCH,
    MAX_GPUS_PER_NODE,
    READINGS_BURST,
    READINGS_PER_SECOND,
)
from finops.settings.group import SettingsGroup

DEFAULT_DATA_DIR = Path("data")


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
