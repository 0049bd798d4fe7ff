"""The hourly ledger: the pure cost model (:mod:`finops.ledger.costmodel`, exact decimals), and the rollup that
meters readings per GPU-hour, splits them between jobs and writes ledger and team-hour rows."""
