"""How the pages show numbers: compact headline figures with the exact value on hover, and tables with human headers.

Tables' columns have human names with their units, thousands separators and right-aligned numbers (:data:`COLUMNS`,
the one mapping from a page's column to its header and format), each table with a CSV download of the same rows.

Money stays :class:`~decimal.Decimal` up to here; rounding is half-even (the ledger's rule) and done only for show.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any, Literal

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from dashboards.charts import COST_COLOURS, USED
from finops.analysis.waste import MEMORY_HELD_BYTES
from finops.csv_cells import dict_rows_csv
from finops.ledger.costmodel import CENT

Number = Decimal | float | int
SUFFIXES = ("", "k", "M", "B", "T")
"""Thousand, million, billion (10⁹), trillion (10¹²): the steps of :func:`compact`."""


def _decimal(value: Number) -> Decimal:
    """``value`` as a Decimal; a float as the decimal of its shortest round-trip text (0.1 is 0.1)."""
    return value if isinstance(value, Decimal) else Decimal(repr(value) if isinstance(value, float) else value)


def _rounded(value: Decimal, places: int) -> Decimal:
    return value.quantize(Decimal(1).scaleb(-places), ROUND_HALF_EVEN)


def _signed(text: str, negative: bool) -> str:
    return f"-{text}" if negative else text


def exact(value: Number, places: int = 2) -> str:
    """``value`` in full with thousands separators and ``places`` decimals (half-even): ``1,030,145.62``."""
    shown = _rounded(_decimal(value), places)
    return _signed(f"{abs(shown):,.{places}f}", shown < 0)


def compact(value: Number, places: int = 2) -> str:
    """``value`` short enough for a headline: below 1,000 (once rounded to ``places`` decimals) as :func:`exact`
    gives it (``999.99``, ``0.00``), else three significant digits and a suffix of :data:`SUFFIXES` (``1.00k``,
    ``71.2k``, ``1.03M``, ``-250M``); rounding half-even, and up into the next suffix when it reaches 1,000 of this
    one (999,999.99 is ``1.00M``, not ``1000k``)."""
    number = _decimal(value)
    magnitude = abs(number)
    if _rounded(magnitude, places) < 1000:
        return exact(number, places)
    for power in range(1, len(SUFFIXES)):
        scaled = magnitude.scaleb(-3 * power)
        for decimals in (2, 1, 0):
            shown = _rounded(scaled, decimals)
            if shown < 10 ** (3 - decimals):
                break
        if shown < 1000:
            break  # else the next suffix; past the last one, more digits
    return _signed(f"{shown:,.{decimals}f}{SUFFIXES[power]}", number < 0)


def money(amount: Decimal, currency: str) -> str:
    """``1,234.57 USD`` (rounded half-even to cents)."""
    return f"{exact(amount)} {currency}".strip()


def cents(amount: Decimal) -> Decimal:
    """``amount`` rounded half-even to cents, for money columns (whose header names the currency)."""
    return amount.quantize(CENT)


def headline(
    label: str,
    value: Number,
    unit: str,
    *,
    places: int = 2,
    place: DeltaGenerator | None = None,
    delta: Number | None = None,
    delta_description: str | None = None,
    delta_color: Literal["normal", "inverse", "off"] = "normal",
) -> None:
    """A headline figure (``st.metric`` in ``place``, default the page): ``value`` :func:`compact` with its ``unit``
    (a currency, ``GPU-h``, …), so that it fits a column of four at the default width, and the exact value
    (:func:`exact`, ``places`` decimals) in the help tooltip beside the label. ``delta``, in the same unit, is shown
    compact under it with ``delta_description`` after it, and its exact value is in the tooltip too."""
    shown = f"{compact(value, places)} {unit}".strip()
    full = f"{exact(value, places)} {unit}".strip()
    change = None
    if delta is not None:
        change = f"{compact(delta, places)} {unit}".strip()
        full += f"; {exact(delta, places)} {unit} {delta_description or ''}".rstrip()
    (place or st).metric(
        label, shown, change, delta_color=delta_color, delta_description=delta_description, help=f"Exact: {full}"
    )


ColumnKind = Literal["text", "money", "number", "count", "percent", "share", "ratio", "time", "day", "flag", "link"]


@dataclass(frozen=True, slots=True)
class Column:
    """How a table shows a column: its header (``{currency}`` is replaced by the table's currency) and its kind:

    ``money`` in the currency and ``number`` a quantity, both with ``places`` decimals; ``count`` a whole number;
    ``percent`` a number of percent (12.5 is ``12.5%``); ``share`` a ratio 0–1 (utilisation) drawn as a bar in the
    colour of used cost, with its percent; ``ratio`` a ratio 0–1 shown as its percent, without a bar (an empty
    cell shows the table's placeholder, which a bar's does not); ``time`` an instant, ``day`` a date; ``flag`` a
    yes/no box; ``link`` a URL; ``text`` anything else. Numbers have thousands separators and are right-aligned.
    ``help`` is the header's tooltip."""

    label: str
    kind: ColumnKind = "text"
    places: int = 2
    help: str | None = None

    def header(self, currency: str | None) -> str:
        """The header, with the currency filled in (ValueError for a money header without one)."""
        if "{currency}" in self.label and not currency:
            raise ValueError(f"the column {self.label!r} needs the table's currency")
        return self.label.format(currency=currency)

    def config(self, currency: str | None) -> Any:
        """The ``st.column_config`` entry that shows the column so."""
        label = self.header(currency)
        config = st.column_config
        decimals = f"%,.{self.places}f"
        numbers = {"money": decimals, "number": decimals, "count": "%,d", "percent": f"{decimals}%%"}
        if self.kind in numbers:
            return config.NumberColumn(label, help=self.help, format=numbers[self.kind], alignment="right")
        if self.kind == "ratio":  # wide enough for the placeholder "not measured"
            return config.NumberColumn(label, help=self.help, format="percent", alignment="right", width=RATIO_WIDTH)
        match self.kind:
            case "share":
                return config.ProgressColumn(
                    label, help=self.help, min_value=0.0, max_value=1.0, format="percent", color=COST_COLOURS[USED]
                )
            case "time":
                return config.DatetimeColumn(label, help=self.help, format="YYYY-MM-DD HH:mm")
            case "day":
                return config.DateColumn(label, help=self.help, format="YYYY-MM-DD")
            case "flag":
                return config.CheckboxColumn(label, help=self.help)
            case "link":
                return config.LinkColumn(label, help=self.help)
        return config.TextColumn(label, help=self.help)


RATIO_WIDTH = 120
"""The width of a ``ratio`` column in pixels: an empty cell's placeholder (``not measured``) fits."""
UNUSED_HELP = "Allocated cost × (1 − utilisation): the part of the held GPU time its readings did not use"
COLUMNS: dict[str, Column] = {
    # who and what
    "team": Column("Team"),
    "project": Column("Project"),
    "user": Column("User"),
    "job": Column("Job"),
    "node": Column("Node"),
    "GPU": Column("GPU"),
    "gpu": Column("GPU index"),
    "model": Column("GPU model"),
    "pricing model": Column("Pricing model"),
    "fix": Column("How to price it"),
    "source": Column("Source", "link"),
    "estimate": Column("Estimate", "flag", help="A source of the price is marked estimate: true: replace it"),
    # GPU time and cost (the fields of finops.analysis.report_format.report_dicts and their kin)
    "allocated_gpu_hours": Column("Allocated GPU-hours", "number"),
    "used_gpu_hours": Column("Used GPU-hours", "number"),
    "idle_gpu_hours": Column("Unused GPU-hours", "number", help="Allocated GPU-hours × (1 − utilisation)"),
    "unmetered_gpu_hours": Column("GPU-hours without readings", "number", help="Neither used nor unused"),
    "unpriced_gpu_hours": Column("Unpriced GPU-hours", "number", help="Counted, not costed: no price for the model"),
    "GPU-hours": Column("GPU-hours", "number"),
    "allocated_cost": Column("Allocated cost ({currency})", "money"),
    "used_cost": Column("Used cost ({currency})", "money", help="Allocated cost × utilisation"),
    "idle_cost": Column("Unused cost ({currency})", "money", help=UNUSED_HELP),
    "energy_kwh": Column("Energy (kWh)", "number"),
    "energy_cost": Column("Energy cost ({currency})", "money", help="Beside the allocated cost, not part of it"),
    "utilization": Column("Utilisation", "share", help="Used ÷ allocated GPU-seconds that have readings"),
    # hardware activity (finops.analysis.report_format.report_dicts; dashboards/activity.py)
    "profiled_share": Column(
        "Profiled", "ratio", help="Share of the held GPU-hours whose readings had profiling data (hardware activity)"
    ),
    "sm_active_ratio": Column(
        "SM activity",
        "ratio",
        help="Mean share of the GPU's SMs with work over the profiled GPU-hours (its band: the table's caption)",
    ),
    "sm_active_band": Column(
        "SM activity band",
        help="Effective, moderate or ineffective by NVIDIA's guidance on SM activity (thresholds: the table's caption)",
    ),
    "tensor_active_ratio": Column("Tensor activity", "ratio", help="Share of cycles the tensor pipes were active"),
    "dram_active_ratio": Column("DRAM activity", "ratio", help="Share of cycles the memory interface was busy"),
    "sm_active_cost": Column(
        "SM-active cost ({currency})", "money", help="Allocated cost × SM activity, over the profiled GPU-hours"
    ),
    # budgets and spend over time
    "budget": Column("Budget ({currency})", "money"),
    "spent": Column("Spent ({currency})", "money"),
    "used_percent": Column("Budget used (%)", "percent", places=1),
    "forecast": Column("Forecast month-end ({currency})", "money"),
    "over_budget": Column("Forecast over budget", "flag"),
    "day": Column("Day (UTC)", "day"),
    "spend": Column("Spend ({currency})", "money"),
    "cumulative_spend": Column("Cumulative spend ({currency})", "money"),
    # idle episodes
    "start": Column("Start (UTC)", "time"),
    "hours": Column("Duration (hours)", "number"),
    "memory_held": Column("Memory held", "flag", help=f"Over {MEMORY_HELD_BYTES // 2**20} MiB of GPU memory in use"),
    "reason": Column("Probable reason", help="Why it idled, by the first rule that holds (docs/waste-reasons.md)"),
    "evidence": Column("Evidence"),
    "episode_cost": Column("Episode cost ({currency})", "money"),
    "unpriced_model": Column("Unpriced GPU model"),
    # readings
    "time (UTC)": Column("Time (UTC)", "time"),
    "from (UTC)": Column("From (UTC)", "time"),
    "to (UTC)": Column("To (UTC)", "time"),
    "GPUs": Column("GPUs", "count"),
    "readings": Column("Readings", "count"),
    "utilisation (%)": Column("GPU utilisation (%)", "percent", places=1),
    "power (W)": Column("Board power (W)", "number", places=1),
    "hottest GPU (°C)": Column("Hottest GPU (°C)", "number", places=0),
    "kind": Column("Kind"),
    "direction": Column("Direction"),
    "mean (GB/s)": Column("Mean throughput (GB/s)", "number", places=3),
    "peak (GB/s)": Column("Peak throughput (GB/s)", "number", places=3),
    # collectors
    "newest reading (UTC)": Column("Newest reading (UTC)", "time"),
    "silent for (minutes)": Column("Silent for (minutes)", "number", places=1),
    "refused as": Column(
        "Refused as",
        help="future: stamped ahead of the service's clock (the node's clock is "
        "fast); too_old: older than the sample retention",
    ),
    "readings refused": Column("Readings refused", "count"),
    "first (UTC)": Column("First refused (UTC)", "time"),
    "last (UTC)": Column("Last refused (UTC)", "time"),
    "newest refusal": Column("Newest refusal"),
    # prices
    "from": Column("Effective from", "day"),
    "per_gpu_hour": Column("Per GPU-hour ({currency})", "money", places=4),
    "capex": Column("Capex per GPU-hour ({currency})", "money", places=4),
    "energy": Column("Energy per GPU-hour ({currency})", "money", places=4),
    "support": Column("Support per GPU-hour ({currency})", "money", places=4),
    # alerts and silences
    "severity": Column("Severity"),
    "rule": Column("Rule"),
    "labels": Column("Labels"),
    "since (UTC)": Column("Since (UTC)", "time"),
    "summary": Column("Summary"),
    "muted": Column("Muted", "flag", help="Held back by a silence or an inhibition"),
    "end": Column("End (UTC)", "time"),
    "id": Column("Silence id"),
    "state": Column("State"),
    "matchers": Column("Matchers"),
    "until (UTC)": Column("Until (UTC)", "time"),
    "created by": Column("Created by"),
    "comment": Column("Comment"),
    # planning
    "zero_stage": Column("ZeRO stage", "count"),
    "training_state_gb": Column("Training state per GPU (GB)", "number", places=1),
    # savings: idle cost by reason
    "month": Column("Month (UTC)"),
    "reason_gpu_hours": Column(
        "GPU-hours", "number", help="Unused GPU-hours (allocated × (1 − utilisation)); for no reading, those held"
    ),
    "reason_cost": Column(
        "Cost ({currency})", "money", help="Unused cost; for no reading, the allocated cost (use unknown)"
    ),
    # savings: right-sizing
    "gpus_requested": Column("GPUs requested", "count"),
    "gpus_busy": Column("GPUs busy", "count", help="Mean utilisation above the idle ratio"),
    "gpus_suggested": Column("GPUs needed", "count", help="The request that suffices: the busy GPUs, at least 1"),
    "saved_gpu_hours": Column("GPU-hours saved", "number", help="Those of the GPUs the smaller request drops"),
    "memory_peak_gib": Column("Memory peak (GiB)", "number"),
    "mig_profile": Column("MIG profile"),
    "smaller_model": Column("Cheaper GPU model"),
    "count_saving": Column("Fewer GPUs saving ({currency})", "money"),
    "memory_saving": Column(
        "MIG or model saving ({currency})", "money", help="The larger of the MIG and cheaper-model savings"
    ),
    "saving": Column("Saving ({currency})", "money"),
    "fixes": Column("Fix", help="The request line that fixes it (job script or pod spec)"),
    "notes": Column("Notes"),
    "jobs": Column("Jobs", "count"),
    "memory_unknown_jobs": Column("Jobs with no memory reading", "count"),
    "unpriced_jobs": Column("Unpriced jobs", "count"),
    # savings: commitments
    "hours_in_window": Column("Hours", "count"),
    "mean_gpus": Column("Mean GPUs held", "number", places=1),
    "peak_gpus": Column("Peak GPUs held", "count"),
    "on_demand_rate": Column("On-demand per GPU-hour ({currency})", "money", places=4),
    "reserved_rate": Column("Reserved per GPU-hour ({currency})", "money", places=4),
    "commit": Column("GPUs to commit", "count", help="The quantity that costs least"),
    "commitment_use": Column("Commitment used", "share", help="Share of the committed GPU-hours jobs held"),
    "on_demand_cost": Column("All on demand ({currency})", "money", help="Every held GPU-hour at the on-demand rate"),
    "committed_cost": Column("With the commitment ({currency})", "money", help="Committed GPUs + overflow on demand"),
    "saving_per_month": Column("Saving per month ({currency})", "money", help="Over a 730-hour month"),
    "spot_commit": Column("GPUs to commit, overflow on spot", "count"),
    "spot_saving_per_month": Column(
        "Saving per month, overflow on spot ({currency})", "money", help="Spot is interruptible: restartable work only"
    ),
    "section": Column("Section"),
    "why": Column("Why not analysed"),
    "what_fixes_it": Column("What fixes it"),
}
"""How every column of the pages' tables is shown, by the name of the column in the page's DataFrame."""


def headers(
    frame: pd.DataFrame, currency: str | None = None, columns: Mapping[str, Column] | None = None
) -> dict[str, str]:
    """The shown header of each column of ``frame`` (:data:`COLUMNS`, then ``columns`` for a table's own; KeyError
    naming a column that neither describes)."""
    known = {**COLUMNS, **(columns or {})}
    missing = [str(c) for c in frame.columns if c not in known]
    if missing:
        raise KeyError(f"no header for the columns {missing}: add them to dashboards.format.COLUMNS")
    return {str(c): known[c].header(currency) for c in frame.columns}


def table(
    frame: pd.DataFrame,
    file_name: str,
    *,
    currency: str | None = None,
    columns: Mapping[str, Column] | None = None,
    key: str | None = None,
    placeholder: str | None = None,
) -> None:
    """``frame`` as an interactive table whose columns are shown as :data:`COLUMNS` (then ``columns``, for a
    table's own) describes them, money in ``currency``, empty cells as ``placeholder`` (default Streamlit's
    ``None``; ``not measured`` in tables of measurements); and a "Download CSV" button under it that downloads the
    same rows as ``file_name`` (UTF-8, the shown headers, money as plain decimals with the currency in the header,
    empty cells empty)."""
    known = {**COLUMNS, **(columns or {})}
    shown = headers(frame, currency, columns)
    config = {name: known[name].config(currency) for name in shown}
    st.dataframe(frame, hide_index=True, width="stretch", column_config=config, placeholder=placeholder)
    st.download_button(
        "Download CSV",
        lambda: frame_csv(frame.rename(columns=shown)),  # made when clicked, not on every run
        file_name=file_name,
        mime="text/csv",
        key=key or f"download-{file_name}",
        on_click="ignore",
    )


def frame_csv(frame: pd.DataFrame) -> str:
    """``frame`` as CSV text with a header line (:func:`finops.csv_cells.dict_rows_csv`: text cells escaped against
    formula injection, numbers unchanged), empty cells (None, NaN, NaT) empty, ``\\n`` line ends."""
    cleaned = frame.astype(object).where(frame.notna(), None)
    names = [str(c) for c in cleaned.columns]
    return dict_rows_csv(names, (dict(zip(names, row, strict=True)) for row in cleaned.itertuples(index=False)))


def duration(seconds: int) -> str:
    """``30 seconds``, ``1 minute``, ``15 minutes``, ``1 hour``, ``6 hours``, ``1 day``."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"
