"""Migration 0005 (alerts): upgrade → downgrade → upgrade on both databases, keeping what was there before."""

from __future__ import annotations

from sqlalchemy import inspect, text

from finops.db.engine import current_revision, downgrade, head_revision, make_engine, upgrade

ALERT_TABLES = {"alert_instances", "alert_groups", "alert_silences", "alert_deliveries"}


def test_alert_schema_upgrades_downgrades_and_upgrades_again(database_url: str) -> None:
    engine = make_engine(database_url)
    upgrade(engine, "0005")
    with engine.begin() as connection:
        assert set(inspect(connection).get_table_names()) >= ALERT_TABLES
        connection.execute(text("INSERT INTO teams (id, name) VALUES (1, 'vision')"))
        connection.execute(
            text(
                "INSERT INTO alert_silences (matchers, starts_at, ends_at, created_by, comment, created_at) "
                "VALUES ('[\"team=vision\"]', 0, 10, 'ops', 'maintenance', 0)"
            )
        )
    downgrade(engine, "0005-1")
    with engine.begin() as connection:
        assert not ALERT_TABLES & set(inspect(connection).get_table_names())
        assert connection.execute(text("SELECT name FROM teams")).scalars().all() == ["vision"]
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    with engine.begin() as connection:
        assert set(inspect(connection).get_table_names()) >= ALERT_TABLES
        assert connection.execute(text("SELECT COUNT(*) FROM alert_silences")).scalar_one() == 0
        assert {c["name"] for c in inspect(connection).get_columns("alert_deliveries")} >= {
            "channel", "target", "payload", "attempts", "next_attempt_at", "deadline", "status", "last_error",
        }  # fmt: skip
    engine.dispose()
