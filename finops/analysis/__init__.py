"""Read-side questions about the ledger: cost reports and their filters, budgets and forecasts, anomalies,
idle episodes, data quality, events, capacity planning, and the queries behind the dashboard pages."""
