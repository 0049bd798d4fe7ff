"""Migration 0022 (team rule precedence, claimed users): upgrade → downgrade → upgrade on both databases. Up, a pod's
user is marked claimed, a pod its own label had billed to another team than its namespace's rule goes back to the
namespace's team with its hours marked for the rollup, and ``site_options`` exists; down, users read as before."""

from __future__ import annotations

from sqlalchemy import inspect, text

from finops.db.engine import current_revision, downgrade, head_revision, make_engine, upgrade

HOUR = 1772445600


def test_team_precedence_upgrade_downgrade_and_upgrade_again(database_url: str) -> None:
    engine = make_engine(database_url)
    upgrade(engine, "0021")
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO teams (name) VALUES ('alpha'), ('beta')"))
        connection.execute(
            text("INSERT INTO team_rules (kind, key, value, team_id) SELECT 'namespace', '', 'beta-ns', id FROM teams "
                 "WHERE name = 'beta' UNION ALL SELECT 'label', 'team', 'alpha', id FROM teams WHERE name = 'alpha'")
        )  # fmt: skip
        for n, (scheduler, user, namespace) in enumerate((("kubernetes", "alice", "beta-ns"), ("slurm", "bob", None))):
            connection.execute(
                text("INSERT INTO jobs (scheduler, cluster, job_id, job_id_raw, \"user\", account, partition, name, "
                     "state, start, \"end\", gpus, node_list, team_id, namespace, labels) SELECT :scheduler, 'c', :n, "
                     ":n, :user, 'beta-ns', '', 'x', 'Running', :start, :end, 1, 'n1', id, :namespace, "
                     "'{\"team\": \"alpha\"}' FROM teams WHERE name = 'alpha'"),
                {"scheduler": scheduler, "n": str(n), "user": user, "namespace": namespace, "start": HOUR,
                 "end": HOUR + 7200},
            )  # fmt: skip
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    users_and_teams = text(
        'SELECT jobs.scheduler, jobs."user", teams.name FROM jobs JOIN teams ON teams.id = jobs.team_id '
        "ORDER BY jobs.scheduler"
    )
    with engine.begin() as connection:
        assert connection.execute(users_and_teams).all() == [
            ("kubernetes", "claimed:alice", "beta"),
            ("slurm", "bob", "alpha"),  # not a pod: its team is as it was (an account rule would have decided)
        ]
        dirty = [h for (h,) in connection.execute(text("SELECT hour FROM ledger_dirty_hours ORDER BY hour"))]
        assert dirty == [HOUR, HOUR + 3600]
        assert "site_options" in inspect(connection).get_table_names()
    downgrade(engine, "0021")
    with engine.begin() as connection:
        assert [u for (_, u, _) in connection.execute(users_and_teams)] == ["alice", "bob"]
        assert "site_options" not in inspect(connection).get_table_names()
    upgrade(engine)
    with engine.begin() as connection:
        assert [u for (_, u, _) in connection.execute(users_and_teams)] == ["claimed:alice", "bob"]
    engine.dispose()
