"""Migration 0011 (node inventory): upgrade → downgrade → upgrade on both databases, keeping the nodes."""

from __future__ import annotations

from sqlalchemy import inspect, text

from finops.db.engine import current_revision, downgrade, head_revision, make_engine, upgrade


def test_node_inventory_upgrades_downgrades_and_upgrades_again(database_url: str) -> None:
    engine = make_engine(database_url)
    upgrade(engine, "0011")
    with engine.begin() as connection:
        assert {"gpu_model", "partitions"} <= {c["name"] for c in inspect(connection).get_columns("nodes")}
        connection.execute(
            text(
                "INSERT INTO nodes (hostname, partition, gpu_model, partitions) "
                "VALUES ('gpu-a-01', 'gpu', 'B200', 'gpu')"
            )
        )
        connection.execute(
            text("INSERT INTO gpus (node_id, gpu_index, model, in_service_from) VALUES (1, 0, 'B200', 0)")
        )
    downgrade(engine, "0010")
    with engine.begin() as connection:
        assert not {"gpu_model", "partitions"} & {c["name"] for c in inspect(connection).get_columns("nodes")}
        assert connection.execute(text("SELECT hostname, partition FROM nodes")).all() == [("gpu-a-01", "gpu")]
        assert connection.execute(text("SELECT model FROM gpus")).scalars().all() == ["B200"]
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    with engine.begin() as connection:
        assert connection.execute(text("SELECT gpu_model FROM nodes")).scalars().all() == [None]
    engine.dispose()
