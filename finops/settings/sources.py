"""Settings of where the service's data comes from: prices, the Prometheus pull or a TSDB, sacct, the
collectors and the demo's traces."""

from __future__ import annotations

import shlex
import typing
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from finops.pricing.catalog import PricingModel
from finops.pricing.peaks import Precision
from finops.settings.group import SettingsGroup

DEFAULT_SACCT_SCHEDULE_SECONDS = 300
"""How often the scheduler imports Slurm jobs when ``FINOPS_SACCT_SCHEDULE_SECONDS`` is unset and sacct can be run."""


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
