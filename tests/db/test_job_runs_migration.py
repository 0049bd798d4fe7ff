"""Migration 0026 (a job row per run) rebuilds ``jobs`` on SQLite: the jobs' allocations and the ledger rows that
name them survive the upgrade and the downgrade on both databases (a rebuild with foreign keys on would have fired
``ON DELETE CASCADE`` on allocations and ``SET NULL`` on the ledger's job)."""

from __future__ import annotations

from sqlalchemy import text

from finops.db.engine import downgrade, make_engine, upgrade

HOUR = 1772445600
COUNTS = text(
    "SELECT (SELECT COUNT(*) FROM jobs), (SELECT COUNT(*) FROM allocations), "
    "(SELECT COUNT(*) FROM ledger WHERE job_pk IS NOT NULL)"
)


def test_the_job_runs_rebuild_keeps_allocations_and_ledger_jobs(database_url: str) -> None:
    engine = make_engine(database_url)
    upgrade(engine, "0025")
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO teams (name) VALUES ('alpha')"))
        connection.execute(text("INSERT INTO nodes (hostname) VALUES ('n1')"))
        connection.execute(
            text("INSERT INTO gpus (node_id, gpu_index, model, in_service_from) SELECT id, 0, 'H100-SXM-80GB', "
                 ":t FROM nodes"),
            {"t": HOUR},
        )  # fmt: skip
        connection.execute(
            text("INSERT INTO jobs (scheduler, cluster, job_id, job_id_raw, \"user\", account, partition, name, "
                 "state, start, \"end\", gpus, node_list, team_id) SELECT 'slurm', 'c', '7', '7', 'u', 'a', 'p', "
                 "'x', 'COMPLETED', :start, :end, 1, 'n1', id FROM teams"),
            {"start": HOUR, "end": HOUR + 3600},
        )  # fmt: skip
        connection.execute(
            text("INSERT INTO allocations (job_pk, gpu_id, start, \"end\", share_num, share_den) "
                 "SELECT jobs.id, gpus.id, jobs.start, jobs.\"end\", 1, 1 FROM jobs, gpus"),
        )  # fmt: skip
        connection.execute(
            text("INSERT INTO ledger (hour, gpu_id, job_pk, team_id, seconds, used_gpu_seconds, sample_count, "
                 "energy_cost, energy_joules, currency, pricing_model) SELECT :hour, gpus.id, jobs.id, jobs.team_id, "
                 "3600, 0, 0, 0, 0, 'USD', 'on_demand' FROM jobs, gpus"),
            {"hour": HOUR},
        )  # fmt: skip
    with engine.connect() as connection:
        assert tuple(connection.execute(COUNTS).one()) == (1, 1, 1)
    upgrade(engine)
    with engine.connect() as connection:
        assert tuple(connection.execute(COUNTS).one()) == (1, 1, 1)
    downgrade(engine, "0025")
    with engine.connect() as connection:
        assert tuple(connection.execute(COUNTS).one()) == (1, 1, 1)
    engine.dispose()
