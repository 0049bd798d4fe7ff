"""The GPU price catalog: effective-dated USD per GPU-hour rates per GPU model and pricing model.

The catalog is a YAML file (default: ``price_catalog.yaml`` next to this module). Every number in it is
read as an exact :class:`~decimal.Decimal` (the YAML loader hands decimal text to ``Decimal``, never to
``float``), validated by pydantic models, and every row names the public source its figure was read from.

A GPU is found by the name whoever reported it gave it (:meth:`PriceCatalog.model_for`): first exactly, among
each model's key and ``aliases`` (the NVML/DCGM product name ``NVIDIA H100 80GB HBM3``, the Slurm GRES type a
site's gres.conf gives it, ``h100``, the Kubernetes ``nvidia.com/gpu.product`` label ``NVIDIA-H100-80GB-HBM3``),
compared case-insensitively with runs of spaces, ``_`` and ``-`` read as one separator (:func:`normalise_name`);
else by the models' ``match`` regular expressions, searched case-insensitively, of which exactly one model must
match. An alias names one model only: two models claiming one is a :class:`CatalogError` naming both.

Cloud rows (on-demand, reserved, spot) carry a ``rate`` in currency per GPU-hour. On-prem rows carry the
parts of a total-cost-of-ownership rate instead, and the hourly rate is computed from them:

    rate = capex / (amortisation_years × 8760 h)                      (straight-line amortisation)
         + board_power_W / 1000 × tariff_per_kWh × PUE                (energy at the facility)
         + support_per_year / 8760 h                                  (support subscription)

PUE (power usage effectiveness, total facility power ÷ IT power) scales the GPU's power to what the site
draws, as defined by The Green Grid and surveyed yearly by the Uptime Institute; tariff and PUE are
catalog-wide settings. The arithmetic runs in :data:`ARITHMETIC` (28 significant digits, half-even), so
the result does not depend on the caller's decimal context.
"""

from __future__ import annotations

import re
from dataclasses import astuple, dataclass
from datetime import UTC, date, datetime, time
from decimal import ROUND_HALF_EVEN, Context, Decimal, localcontext
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from finops.errors import FinopsError
from finops.pricing import catalog_yaml
from finops.pricing.package_share import package_share
from finops.pricing.peaks import PeakTflops
from finops.pricing.sources import Source, no_float

DEFAULT_CATALOG = Path(__file__).parent / "price_catalog.yaml"
HOURS_PER_YEAR = Decimal(8760)
WATTS_PER_KW = Decimal(1000)
ARITHMETIC = Context(prec=28, rounding=ROUND_HALF_EVEN)
"""Decimal context of the on-prem arithmetic: 28 significant digits, rounding half-even."""
MAX_PROBLEMS = 20
"""Most validation problems a :class:`CatalogError` names (then how many more there were)."""


class PricingModel(StrEnum):
    """How a GPU is paid for; one price series per model and pricing model."""

    ON_DEMAND = "on-demand"
    RESERVED = "reserved"
    SPOT = "spot"
    ON_PREM = "on-prem"


class PriceNotFound(LookupError):
    """No catalog model matches a GPU name, or no row of a pricing model is in effect at a time."""


class CatalogError(FinopsError, ValueError):
    """The catalog file cannot be read or is invalid; the message names the file and the field."""


Money = Annotated[Decimal, BeforeValidator(no_float), Field(ge=0, allow_inf_nan=False)]
"""An amount >= 0 in the catalog currency, exact."""


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    effective_from: date
    sources: list[Source] = Field(min_length=1)

    @property
    def starts(self) -> datetime:
        """00:00 UTC of ``effective_from``: the first instant this row applies."""
        return datetime.combine(self.effective_from, time(), UTC)


class RateRow(_Row):
    """A cloud price: ``rate`` currency per GPU-hour from ``effective_from`` on."""

    pricing_model: PricingModel
    rate: Money

    @field_validator("pricing_model")
    @classmethod
    def _not_on_prem(cls, value: PricingModel) -> PricingModel:
        if value is PricingModel.ON_PREM:
            raise ValueError("an on-prem row gives its parts, not a rate")
        return value


class OnPremRow(_Row):
    """An owned GPU's cost parts, from which the hourly rate is computed (see the module docstring)."""

    pricing_model: Literal[PricingModel.ON_PREM]
    capex_usd: Money
    amortisation_years: Annotated[Decimal, BeforeValidator(no_float), Field(gt=0, allow_inf_nan=False)]
    board_power_watts: Annotated[Decimal, BeforeValidator(no_float), Field(ge=0, allow_inf_nan=False)]
    support_per_year_usd: Money


def _row_kind(value: object) -> str:
    """Which row model validates ``value``: on-prem rows have parts, every other pricing model a rate."""
    if isinstance(value, dict):
        return _ON_PREM_ROW if value.get("pricing_model") == PricingModel.ON_PREM else _CLOUD_ROW
    return _ON_PREM_ROW if isinstance(value, OnPremRow) else _CLOUD_ROW


_CLOUD_ROW, _ON_PREM_ROW = "cloud row", "on-prem row"
PriceRow = Annotated[
    Annotated[RateRow, Tag(_CLOUD_ROW)] | Annotated[OnPremRow, Tag(_ON_PREM_ROW)], Discriminator(_row_kind)
]


@dataclass(frozen=True, slots=True)
class OnPremParts:
    """The parts of an on-prem rate, each in currency per GPU-hour, and their sum."""

    capex_per_hour: Decimal
    energy_per_hour: Decimal
    support_per_hour: Decimal

    @property
    def total(self) -> Decimal:
        """capex + energy + support per GPU-hour, in :data:`ARITHMETIC`."""
        with localcontext(ARITHMETIC):
            return self.capex_per_hour + self.energy_per_hour + self.support_per_hour


_SEPARATORS = re.compile(r"[\s_-]+")


def normalise_name(name: str) -> str:
    """A GPU name as aliases are compared: case-folded, trimmed, each run of spaces, ``_`` and ``-`` one ``-``
    (``A100_80GB`` and ``a100-80gb`` -> ``a100-80gb``; ``NVIDIA-H100-80GB-HBM3`` and ``NVIDIA H100 80GB HBM3`` ->
    ``nvidia-h100-80gb-hbm3``)."""
    return _SEPARATORS.sub("-", name.strip().casefold()).strip("-")


GIB = 2**30
"""Bytes in a GiB."""

MIG_PROFILE_PATTERN = r"^([1-9][0-9]?)g\.([1-9][0-9]*)gb$"
"""A MIG GPU instance profile as the NVIDIA MIG user guide names it: ``<compute slices>g.<memory GB>gb``
(``1g.10gb``); the media-extension variants (``+me``) hold the same compute and memory and are not listed."""


class MemorySize(BaseModel):
    """A model's memory: ``gib`` as its datasheet names it (80 for "80GB"), and where that was read.

    Datasheets' "GB" of HBM are GiB-sized and NVML reports a little less as usable (81,559 MiB ≈ 79.6 GiB on an
    H100 80GB), so the size is a nominal one, compared as GiB against memory in use."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gib: Annotated[Decimal, BeforeValidator(no_float), Field(gt=0, allow_inf_nan=False)]
    source: Source

    @property
    def bytes(self) -> Decimal:
        """The size in bytes (``gib`` × 2³⁰)."""
        return self.gib * GIB


class MigProfiles(BaseModel):
    """The MIG GPU instance profiles a model supports (``1g.10gb`` …, :data:`MIG_PROFILE_PATTERN`), from the NVIDIA
    MIG user guide's "Supported MIG Profiles" tables, and where they were read.

    A profile's memory is the number in its name (GB, read as GiB like the model's own, :class:`MemorySize`;
    ``nvidia-smi mig -lgip`` shows 9.75 GiB usable for ``1g.10gb`` on an H100 80GB); its share of the GPU's
    compute, and so of its price, is its compute slices over the model's (:func:`finops.jobs.mig.mig_share`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    profiles: list[Annotated[str, Field(pattern=MIG_PROFILE_PATTERN)]] = Field(min_length=1)
    source: Source

    @field_validator("profiles")
    @classmethod
    def _distinct(cls, profiles: list[str]) -> list[str]:
        repeated = sorted({profile for profile in profiles if profiles.count(profile) > 1})
        if repeated:
            raise ValueError(f"profile {repeated[0]!r} is listed twice")
        return profiles

    @staticmethod
    def memory_gib(profile: str) -> int:
        """The memory of ``profile`` in GiB, from its name (``"3g.40gb"`` -> 40); ValueError for another name."""
        found = re.fullmatch(MIG_PROFILE_PATTERN, profile)
        if found is None:
            raise ValueError(f"{profile!r} is not a MIG profile such as 1g.10gb")
        return int(found.group(2))


class GpuModel(BaseModel):
    """One catalog model: the names it covers (exact ``aliases``, ``match`` expressions), its price rows (none for a
    model no citable price was found for: its GPUs are named and measured, and their hours unpriced), and,
    optionally, its ``vendor`` (``nvidia``, ``amd``: code built for one does not run on the other's GPUs unchanged),
    ``memory`` size and ``mig`` profiles (what right-sizing and the MIG nudges compare memory in use with,
    :mod:`finops.savings.rightsizing`, :mod:`finops.savings.mig_profiles`), and ``peak_tflops``, its datasheet's
    dense peak per precision (:class:`~finops.pricing.peaks.PeakTflops`, the denominator of
    :mod:`finops.analysis.mfu`). A model with ``mig`` needs a
    ``memory`` at least as large as its largest profile's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = Field(min_length=1)
    aliases: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    match: list[str] = Field(min_length=1)
    prices: list[PriceRow]
    vendor: Literal["nvidia", "amd"] | None = None
    memory: MemorySize | None = None
    mig: MigProfiles | None = None
    peak_tflops: PeakTflops | None = None
    _patterns: list[re.Pattern[str]] = PrivateAttr(default_factory=list)

    @field_validator("match")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for index, pattern in enumerate(patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"match[{index}] {pattern!r} is not a valid regular expression: {exc}") from exc
        return patterns

    def model_post_init(self, context: Any, /) -> None:
        """Compile the ``match`` expressions once, case-insensitive."""
        self._patterns = [re.compile(pattern, re.IGNORECASE) for pattern in self.match]

    @model_validator(mode="after")
    def _mig_within_memory(self) -> GpuModel:
        if self.mig is None:
            return self
        if self.memory is None:
            raise ValueError("mig profiles need the model's memory (memory.gib) beside them")
        largest = max(self.mig.profiles, key=MigProfiles.memory_gib)
        if MigProfiles.memory_gib(largest) > self.memory.gib:
            raise ValueError(f"mig profile {largest!r} holds more memory than the model's {self.memory.gib} GiB")
        return self

    @model_validator(mode="after")
    def _one_row_per_date(self) -> GpuModel:
        seen: set[tuple[PricingModel, date]] = set()
        for row in self.prices:
            key = (row.pricing_model, row.effective_from)
            if key in seen:
                raise ValueError(f"two {row.pricing_model} rows take effect on {row.effective_from}")
            seen.add(key)
        return self

    def matches(self, gpu_name: str) -> bool:
        """Whether any ``match`` expression is found in ``gpu_name`` (case-insensitive)."""
        return any(pattern.search(gpu_name) for pattern in self._patterns)

    def row_at(self, pricing_model: PricingModel, at: datetime) -> RateRow | OnPremRow | None:
        """The row of ``pricing_model`` with the latest ``effective_from`` not after ``at``, if any."""
        rows = [row for row in self.prices if row.pricing_model == pricing_model and row.starts <= at]
        return max(rows, key=lambda row: row.effective_from, default=None)


class PriceCatalog(BaseModel):
    """The whole catalog: currency, facility energy settings and the GPU models."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    currency: str = Field(pattern=r"^[A-Z]{3}$", description="ISO 4217 code of every amount in the catalog.")
    tariff_per_kwh: Money = Field(description="Electricity price, currency per kWh.")
    tariff_source: Source
    pue: Annotated[Decimal, BeforeValidator(no_float), Field(ge=1, allow_inf_nan=False)] = Field(
        description="Power usage effectiveness of the facility (total power / IT power), >= 1."
    )
    pue_source: Source
    models: dict[str, GpuModel] = Field(min_length=1)
    _aliases: dict[str, str] = PrivateAttr(default_factory=dict)

    @field_validator("models")
    @classmethod
    def _aliases_unique(cls, models: dict[str, GpuModel]) -> dict[str, GpuModel]:
        owners: dict[str, str] = {}
        for key, model in models.items():
            for name in {normalise_name(key), *(normalise_name(alias) for alias in model.aliases)}:
                other = owners.setdefault(name, key)
                if other != key:
                    raise ValueError(f"alias {name!r} is claimed by two models, {other} and {key}; keep it on one")
        return models

    def model_post_init(self, context: Any, /) -> None:
        """Index every model's key and aliases by :func:`normalise_name`."""
        for key, model in self.models.items():
            self._aliases[normalise_name(key)] = key
            self._aliases.update((normalise_name(alias), key) for alias in model.aliases)

    def resolve(self, gpu_name: str) -> str | None:
        """The key of the catalog model ``gpu_name`` names (:meth:`model_for`), or None when it names none or
        several."""
        try:
            return self.model_for(gpu_name)
        except PriceNotFound:
            return None

    def model_for(self, gpu_name: str) -> str:
        """The key of the catalog model ``gpu_name`` names: the model with that key or alias (exact, after
        :func:`normalise_name`), else the one model whose ``match`` finds it; else PriceNotFound."""
        exact = self._aliases.get(normalise_name(gpu_name))
        if exact is not None:
            return exact
        keys = [key for key, model in self.models.items() if model.matches(gpu_name)]
        if not keys:
            raise PriceNotFound(f"no price catalog model matches GPU {gpu_name!r}")
        if len(keys) > 1:
            raise PriceNotFound(f"GPU {gpu_name!r} matches several price catalog models: {', '.join(keys)}")
        return keys[0]

    def rate(self, gpu_name: str, pricing_model: PricingModel, at: datetime) -> Decimal:
        """Currency per GPU-hour for ``gpu_name`` under ``pricing_model`` at the aware instant ``at``; for a
        compute partition of a package (:func:`finops.pricing.package_share.package_share`), its share of the rate.

        The row with the latest ``effective_from`` (00:00 UTC) not after ``at`` applies. On-prem rates
        are computed from their parts (:meth:`onprem_parts`). Raises PriceNotFound when no model or row
        applies, ValueError when ``at`` is naive.
        """
        if pricing_model is PricingModel.ON_PREM:
            return self.onprem_parts(gpu_name, at).total
        row = self._row(gpu_name, pricing_model, at)
        assert isinstance(row, RateRow)  # _row_kind gives every pricing model but on-prem a RateRow
        share = package_share(gpu_name)
        with localcontext(ARITHMETIC):
            return row.rate if share == 1 else row.rate * share.numerator / share.denominator

    def onprem_parts(self, gpu_name: str, at: datetime) -> OnPremParts:
        """The on-prem rate's parts for ``gpu_name`` at ``at``, in currency per GPU-hour.

        capex / (years × 8760), board power in kW × tariff × PUE, support per year / 8760.
        """
        row = self._row(gpu_name, PricingModel.ON_PREM, at)
        assert isinstance(row, OnPremRow)  # _row_kind gives on-prem rows an OnPremRow
        parts = self.parts_of(row)
        share = package_share(gpu_name)
        if share == 1:
            return parts
        with localcontext(ARITHMETIC):
            return OnPremParts(*(part * share.numerator / share.denominator for part in astuple(parts)))

    def parts_of(self, row: OnPremRow) -> OnPremParts:
        """The parts of on-prem ``row`` at this catalog's tariff and PUE (formula on :meth:`onprem_parts`)."""
        with localcontext(ARITHMETIC):
            return OnPremParts(
                capex_per_hour=row.capex_usd / (row.amortisation_years * HOURS_PER_YEAR),
                energy_per_hour=row.board_power_watts / WATTS_PER_KW * self.tariff_per_kwh * self.pue,
                support_per_hour=row.support_per_year_usd / HOURS_PER_YEAR,
            )

    def _row(self, gpu_name: str, pricing_model: PricingModel, at: datetime) -> RateRow | OnPremRow:
        if at.tzinfo is None:
            raise ValueError(f"naive datetime {at.isoformat()}: price lookups need a timezone-aware time")
        key = self.model_for(gpu_name)
        row = self.models[key].row_at(pricing_model, at.astimezone(UTC))
        if row is None:
            raise PriceNotFound(
                f"no {pricing_model} price for {key} (GPU {gpu_name!r}) in effect at {at.astimezone(UTC).isoformat()}"
            )
        return row


def load_catalog(path: Path | None = None) -> PriceCatalog:
    """Read and validate the price catalog at ``path`` (default: the packaged ``price_catalog.yaml``).

    Raises CatalogError naming the file and, for invalid content, each offending field
    (``models.H100-SXM-80GB.prices[2].rate: ...``).
    """
    path = DEFAULT_CATALOG if path is None else path
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"price catalog {path}: cannot read: {exc.strerror or exc}") from exc
    return parse_catalog(text, str(path))


def parse_catalog(text: str, source: str) -> PriceCatalog:
    """Validate catalog YAML ``text``; ``source`` (a file name) is named in every CatalogError: invalid YAML (with
    its line), YAML past a bound of :mod:`finops.pricing.catalog_yaml` (size, nesting, nodes, models), or each
    field refused (the first :data:`MAX_PROBLEMS`)."""
    try:
        data = catalog_yaml.load(text)
    except catalog_yaml.CatalogTooLarge as exc:
        raise CatalogError(f"price catalog {source}: {exc}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise CatalogError(
            f"price catalog {source}: invalid YAML{where}: {getattr(exc, 'problem', None) or exc}"
        ) from exc
    try:
        return PriceCatalog.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        problems = "; ".join(_problem(error["loc"], error["msg"], error["input"]) for error in errors[:MAX_PROBLEMS])
        more = f"; and {len(errors) - MAX_PROBLEMS} more problems" if len(errors) > MAX_PROBLEMS else ""
        raise CatalogError(f"price catalog {source}: {problems}{more}") from exc


def _problem(loc: tuple[int | str, ...], message: str, given: object) -> str:
    """One validation error as ``path: message``, with the offending value when it is a scalar."""
    shown = f" (got {given!r})" if isinstance(given, str | int | Decimal | date) else ""
    return f"{_field(loc)}: {message}{shown}"


def _field(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a path: ``models.H100.prices[2].rate`` (row-kind tags left out)."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part not in (_CLOUD_ROW, _ON_PREM_ROW):
            path += f".{part}" if path else part
    return path or "(top level)"


@dataclass(frozen=True, slots=True)
class Pricing:
    """What a rebuild prices with: the catalog (rates, energy tariff, PUE) and the default pricing model of a GPU
    whose node no :class:`finops.db.models.PricingRule` selects."""

    catalog: PriceCatalog
    model: PricingModel
