"""Migration 0013 (unpriced idle episodes): upgrade → downgrade → upgrade on both databases. Up, an idle episode's
cost may be NULL; down, NULL costs become 0 (what the older code stored) and NOT NULL is back, priced costs kept."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from finops.db.engine import current_revision, downgrade, head_revision, make_engine, upgrade

EPISODE = text(
    'INSERT INTO idle_episodes (gpu_id, job_pk, start, "end", memory_held, cost, currency) '
    "SELECT gpus.id, jobs.id, :start, :start + 1800, false, :cost, 'USD' FROM gpus, jobs"
)


def _cost_nullable(connection) -> bool:  # type: ignore[no-untyped-def]
    (cost,) = [c for c in inspect(connection).get_columns("idle_episodes") if c["name"] == "cost"]
    return bool(cost["nullable"])


def test_unpriced_idle_episodes_upgrade_downgrade_and_upgrade_again(database_url: str) -> None:
    engine = make_engine(database_url)
    upgrade(engine, "0013")
    with engine.begin() as connection:
        assert _cost_nullable(connection)
        connection.execute(text("INSERT INTO nodes (hostname) VALUES ('gpu-a-01')"))
        connection.execute(text("INSERT INTO teams (name) VALUES ('alpha')"))
        connection.execute(
            text("INSERT INTO gpus (uuid, node_id, gpu_index, model, in_service_from) "
                 "SELECT 'GPU-1', id, 0, 'ACME Z9 64GB', 0 FROM nodes")
        )  # fmt: skip
        connection.execute(
            text("INSERT INTO jobs (scheduler, cluster, job_id, job_id_raw, \"user\", account, partition, name, state, "
                 "gpus, node_list, team_id) SELECT 'slurm', 'orion', '501', '501', 'alice', 'acct-a', 'gpu', 'train', "
                 "'COMPLETED', 1, 'gpu-a-01', id FROM teams")
        )  # fmt: skip
        connection.execute(EPISODE, {"start": 1772445600, "cost": 2})
        connection.execute(EPISODE, {"start": 1772449200, "cost": None})
    downgrade(engine, "0012")
    with engine.begin() as connection:
        assert not _cost_nullable(connection)
        costs = connection.execute(text("SELECT start, cost FROM idle_episodes ORDER BY start")).all()
        assert [(start, float(cost)) for start, cost in costs] == [(1772445600, 2.0), (1772449200, 0.0)]
    with pytest.raises(IntegrityError), engine.begin() as connection:
        connection.execute(EPISODE, {"start": 1772452800, "cost": None})
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    with engine.begin() as connection:
        assert _cost_nullable(connection)
        connection.execute(EPISODE, {"start": 1772452800, "cost": None})
        assert connection.execute(text("SELECT count(*) FROM idle_episodes WHERE cost IS NULL")).scalar_one() == 1
    engine.dispose()
