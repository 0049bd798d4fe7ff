"""Service settings, read from the environment (prefix ``FINOPS_``) by pydantic-settings.

Secrets can also come from a file: ``FINOPS_INGEST_TOKEN_FILE=/run/secrets/token`` reads the token from
that file. Setting both the value and the ``_FILE`` variant is an error. Secrets are never logged.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from finops.prices import PricingModel

DEFAULT_DATA_DIR = Path("data")


class Settings(BaseSettings):
    """All service settings. Each field is ``FINOPS_<NAME>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="FINOPS_", extra="ignore")

    data_dir: Path = Field(DEFAULT_DATA_DIR, description="Directory for the embedded SQLite database.")
    database_url: str = Field(
        "",
        description="SQLAlchemy URL; empty means sqlite:///<data_dir>/gpu-finops.sqlite. "
        "PostgreSQL: postgresql+psycopg://user@host/db.",
    )
    ingest_token: SecretStr | None = Field(None, description="Bearer token collectors must present.")
    ingest_token_file: Path | None = Field(None, description="File holding the ingest token.")
    api_token: SecretStr | None = Field(None, description="Bearer token of the REST API; default: the ingest token.")
    api_token_file: Path | None = Field(None, description="File holding the REST API token.")
    idle_grace_seconds: int = Field(
        600, ge=0, description="Seconds after a job starts during which a GPU is not judged idle (start-up)."
    )
    idle_partition_thresholds: dict[str, float] = Field(
        default_factory=dict,
        description='Idle threshold ratio per Slurm partition, JSON: {"interactive": 0.01}; others use the default.',
    )
    pricing_model: PricingModel = Field(PricingModel.ON_DEMAND, description="Pricing model of every GPU.")
    price_catalog: Path | None = Field(None, description="Price catalog YAML; default: the packaged one.")
    idle_threshold_ratio: float = Field(0.05, ge=0, le=1, description="Utilisation at or below this is idle.")
    idle_window_seconds: int = Field(1800, gt=0, description="An idle run this long is an idle episode.")
    idle_max_gap_seconds: int = Field(
        150, gt=0, description="Two idle samples further apart than this break an idle run."
    )
    shared_data: Path = Field(Path("../shared/data"), description="Folder of real third-party traces.")
    rollup_interval_seconds: int = Field(300, gt=0, description="How often the scheduler rolls up the ledger.")
    sample_retention_days: int = Field(
        35,
        ge=1,
        description="Days of raw GPU samples kept (whole UTC days before today); older ones are dropped daily. "
        "Hours still waiting for a ledger rebuild keep theirs. The ledger is kept.",
    )
    prometheus_url: str = Field(
        "", description="Prometheus to pull dcgm-exporter telemetry from every rollup interval; empty: no pull."
    )
    prometheus_selector: str = Field("", description='Label matchers added to the pulled series, e.g. {cluster="a"}.')
    prometheus_step_seconds: int = Field(60, gt=0, description="Seconds between readings pulled from Prometheus.")
    sacct_command: str = Field("sacct", description="sacct command (split like a shell command line), run with TZ=UTC.")
    sacct_schedule_seconds: int = Field(
        0, ge=0, description="How often the scheduler imports Slurm jobs with sacct; 0: not scheduled."
    )
    sacct_cluster: str = Field("default", description="Cluster of the scheduled sacct import (watermark sacct:<name>).")
    sacct_overlap_seconds: int = Field(
        600, ge=0, description="Each sacct run re-reads this much before the last run's end (late accounting records)."
    )
    sacct_lookback_seconds: int = Field(86400, gt=0, description="How far back the first sacct run reads.")
    sacct_timeout_seconds: float = Field(300.0, gt=0, description="A sacct run taking longer fails.")

    @model_validator(mode="after")
    def _secrets_from_files(self) -> Settings:
        for name in ("ingest_token", "api_token"):
            path: Path | None = getattr(self, f"{name}_file")
            variable = f"FINOPS_{name.upper()}"
            if getattr(self, name) is not None and path is not None:
                raise ValueError(f"set {variable} or {variable}_FILE, not both")
            if path is not None:
                try:
                    secret = path.read_text().strip()
                except OSError as exc:
                    raise ValueError(f"{variable}_FILE {path}: {exc.strerror}") from exc
                setattr(self, name, SecretStr(secret))
        return self

    @property
    def effective_database_url(self) -> str:
        """The configured URL, or the embedded SQLite file under ``data_dir``."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'gpu-finops.sqlite').resolve()}"
