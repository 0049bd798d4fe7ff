"""Storage: the engine and migrations, the typed models, column types, per-database SQL differences and the
ledger's dirty-hour marks. Every other subsystem reaches the database through this package."""
