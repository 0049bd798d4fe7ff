"""The demo: a GPU-cluster week replayed through collector → service → ledger → report → dashboard."""
