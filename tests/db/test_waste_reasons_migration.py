"""Migration 0020 (waste reasons): upgrade → downgrade → upgrade on both databases. Up, the idle episodes stored
before keep their rows with no reason (NULL: not judged yet) and ``node_io_hours`` exists, keyed by node, hour and
kind; down, the episodes keep everything else and the table is gone."""

from __future__ import annotations

from sqlalchemy import inspect, text

from finops.db.engine import current_revision, downgrade, head_revision, make_engine, upgrade

EPISODE = text(
    'INSERT INTO idle_episodes (gpu_id, job_pk, start, "end", memory_held, cost, currency) '
    "SELECT gpus.id, jobs.id, :start, :start + 1800, false, 2, 'USD' FROM gpus, jobs"
)


def test_waste_reasons_upgrade_downgrade_and_upgrade_again(database_url: str) -> None:
    engine = make_engine(database_url)
    upgrade(engine, "0019")
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO nodes (hostname) VALUES ('gpu-a-01')"))
        connection.execute(text("INSERT INTO teams (name) VALUES ('alpha')"))
        connection.execute(
            text("INSERT INTO gpus (uuid, node_id, gpu_index, model, in_service_from) "
                 "SELECT 'GPU-1', id, 0, 'NVIDIA H100 80GB HBM3', 0 FROM nodes")
        )  # fmt: skip
        connection.execute(
            text("INSERT INTO jobs (scheduler, cluster, job_id, job_id_raw, \"user\", account, partition, name, state, "
                 "gpus, node_list, team_id) SELECT 'slurm', 'orion', '501', '501', 'alice', 'acct-a', 'gpu', 'train', "
                 "'COMPLETED', 1, 'gpu-a-01', id FROM teams")
        )  # fmt: skip
        connection.execute(EPISODE, {"start": 1772445600})
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    with engine.begin() as connection:
        assert connection.execute(text("SELECT start, reason, evidence FROM idle_episodes")).all() == [
            (1772445600, None, None)
        ]
        table = inspect(connection)
        assert table.get_pk_constraint("node_io_hours")["constrained_columns"] == ["node_id", "hour", "kind"]
        connection.execute(
            text("INSERT INTO node_io_hours (node_id, hour, kind, readings, rate_sum, rate_max, last_ts) "
                 "SELECT id, 1772445600, 'lustre_read', 1, 2.1e9, 2.1e9, 1772445610 FROM nodes")
        )  # fmt: skip
        connection.execute(text("UPDATE idle_episodes SET reason = 'waiting_on_storage', evidence = 'reads'"))
    downgrade(engine, "0019")
    with engine.begin() as connection:
        assert "node_io_hours" not in inspect(connection).get_table_names()
        assert connection.execute(text("SELECT start, cost FROM idle_episodes")).one()[0] == 1772445600
        assert "reason" not in {c["name"] for c in inspect(connection).get_columns("idle_episodes")}
    upgrade(engine)
    with engine.begin() as connection:
        assert connection.execute(text("SELECT reason FROM idle_episodes")).scalar_one() is None
    engine.dispose()
