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
    pricing_model: PricingModel = Field(PricingModel.ON_DEMAND, description="Pricing model of every GPU.")
    price_catalog: Path | None = Field(None, description="Price catalog YAML; default: the packaged one.")
    idle_threshold_ratio: float = Field(0.05, ge=0, le=1, description="Utilisation at or below this is idle.")
    idle_window_seconds: int = Field(1800, gt=0, description="An idle run this long is an idle episode.")
    idle_max_gap_seconds: int = Field(
        150, gt=0, description="Two idle samples further apart than this break an idle run."
    )
    shared_data: Path = Field(Path("../shared/data"), description="Folder of real third-party traces.")
    rollup_interval_seconds: int = Field(300, gt=0, description="How often the scheduler rolls up the ledger.")
    prometheus_url: str = Field(
        "", description="Prometheus to pull dcgm-exporter telemetry from every rollup interval; empty: no pull."
    )
    prometheus_selector: str = Field("", description='Label matchers added to the pulled series, e.g. {cluster="a"}.')
    prometheus_step_seconds: int = Field(60, gt=0, description="Seconds between readings pulled from Prometheus.")

    @model_validator(mode="after")
    def _token_from_file(self) -> Settings:
        if self.ingest_token is not None and self.ingest_token_file is not None:
            raise ValueError("set FINOPS_INGEST_TOKEN or FINOPS_INGEST_TOKEN_FILE, not both")
        if self.ingest_token_file is not None:
            try:
                token = self.ingest_token_file.read_text().strip()
            except OSError as exc:
                raise ValueError(f"FINOPS_INGEST_TOKEN_FILE {self.ingest_token_file}: {exc.strerror}") from exc
            self.ingest_token = SecretStr(token)
        return self

    @property
    def effective_database_url(self) -> str:
        """The configured URL, or the embedded SQLite file under ``data_dir``."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'gpu-finops.sqlite').resolve()}"
