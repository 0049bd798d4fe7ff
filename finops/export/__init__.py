"""The ledger in standard cost formats: FinOps FOCUS cost and usage rows (CSV or Parquet)."""
