"""Prices: the effective-dated catalogue in force (the newest imported, else the configured file) per GPU model
and pricing model, on-prem rates shown with their parts, each row saying whether it rests on an estimate (a source
marked ``estimate: true``); the models without a price row are named (their GPU-hours are unpriced)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboards import data
from dashboards.format import money, table
from finops.pricing.catalog import OnPremRow, RateRow

st.title("Prices")
catalog = data.catalog(data.database_url())
currency = catalog.currency
st.caption(
    f"Per GPU-hour, in {currency}. On-prem: capex over its amortisation, board power x tariff "
    f"({money(catalog.tariff_per_kwh, currency)}/kWh) x PUE ({catalog.pue}), and support."
)
rows = []
for name, model in catalog.models.items():
    for row in model.prices:
        entry = {"model": name, "pricing model": str(row.pricing_model), "from": row.effective_from}
        if isinstance(row, RateRow):
            entry["per_gpu_hour"] = row.rate
        elif isinstance(row, OnPremRow):
            parts = catalog.parts_of(row)
            entry |= {
                "per_gpu_hour": parts.total,
                "capex": parts.capex_per_hour,
                "energy": parts.energy_per_hour,
                "support": parts.support_per_hour,
            }
        entry["source"] = row.sources[0].url
        entry["estimate"] = any(source.estimate for source in row.sources)
        rows.append(entry)
columns = ["model", "pricing model", "from", "per_gpu_hour", "capex", "energy", "support", "source", "estimate"]
frame = pd.DataFrame(rows, columns=columns)
table(frame, "prices.csv", currency=currency)
if frame["estimate"].any():
    estimated = sorted({f"{r['model']} ({r['pricing model']})" for r in rows if r["estimate"]})
    st.warning(
        f"These prices rest on an estimate (an undated listing, a figure as recalled): {', '.join(estimated)}. "
        "Replace them with your own rates: gpu-finops prices import FILE."
    )
unpriced = sorted(name for name, model in catalog.models.items() if not model.prices)
if unpriced:
    st.info(f"No price row, so their GPU-hours are unpriced until you add one: {', '.join(unpriced)}.")
