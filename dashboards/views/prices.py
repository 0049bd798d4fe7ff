"""Prices: the effective-dated catalogue per GPU model and pricing model, on-prem rates shown with their parts."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboards.format import money, table
from finops.prices import OnPremRow, RateRow, load_catalog
from finops.settings import Settings

st.title("Prices")
catalog = load_catalog(Settings().price_catalog)
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
            entry["per GPU-hour"] = money(row.rate, currency)
        elif isinstance(row, OnPremRow):
            parts = catalog.parts_of(row)
            entry |= {
                "per GPU-hour": money(parts.total, currency),
                "capex": money(parts.capex_per_hour, currency),
                "energy": money(parts.energy_per_hour, currency),
                "support": money(parts.support_per_hour, currency),
            }
        entry["source"] = row.sources[0].url
        rows.append(entry)
frame = pd.DataFrame(rows)
table(frame, "prices.csv", column_config={"source": st.column_config.LinkColumn()})
