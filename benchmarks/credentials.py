"""What a per-node token costs the service per POST against the shared token, same run, same requests.

Usage::

    .venv/bin/python benchmarks/credentials.py postgresql+psycopg://postgres@127.0.0.1:5432/bench \\
        [--gpus 800] [--clients 8] [--repeat 3] [--checks 20000]

The database's schema is dropped and migrated afresh. Prints figures; asserts nothing about time.

Workload: the steady state of :mod:`benchmarks.ingest` (each node's first 20 cycles of 8 GPU readings as
single-cycle POSTs, gzip JSON as the collector sends them), ``--gpus`` / 8 nodes, each holding a node token
(``gpu-finops nodes token create``). ``gpu-finops serve --no-scheduler`` runs as its own process with the shared
token set too, so the same server answers both kinds. Alternating, ``--repeat`` times, into the emptied table:

- **shared**: every POST with the shared ``FINOPS_INGEST_TOKEN`` (a constant-time comparison);
- **node**: every POST with its node's token (a primary-key read of ``node_tokens``, a SHA-256, and the check that
  the batch is the token's node's).

Per run: POST/s and the service process's CPU time per POST (from /proc), medians; the difference is the
credential check's cost on the HTTP path. Then, in this process, the check alone, ``--checks`` times each:
:class:`finops.web.auth.IngestAuth` with the shared and with a node token, and :class:`finops.web.auth.ApiAuth`
with ``FINOPS_API_TOKEN`` and with an API token, µs per check (wall and CPU).
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sqlalchemy import make_url  # noqa: E402

from benchmarks.ingest import (  # noqa: E402
    GPUS_PER_NODE,
    STEADY_CYCLES,
    Backends,
    _bodies,
    _fleet_samples,
    http_run,
    serving,
)
from finops.access.api_tokens import create_token as create_api_token  # noqa: E402
from finops.db.engine import downgrade, make_engine, session_factory, upgrade  # noqa: E402
from finops.ingest.node_tokens import create_token as create_node_token  # noqa: E402
from finops.ingest.partitions import create_partitions  # noqa: E402
from finops.timeutil import to_epoch, utc_now  # noqa: E402
from finops.web.auth import ApiAuth, IngestAuth  # noqa: E402

ACTOR = "system:benchmark"
"""The audit log's actor of the tokens the benchmark makes."""


def per_check(check: Callable[[], object], times: int) -> tuple[float, float]:
    """(wall µs, CPU µs) per call of ``check``, over ``times`` calls."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(times):
        check()
    return (time.perf_counter() - wall) * 1e6 / times, (time.process_time() - cpu) * 1e6 / times


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("database_url", help="PostgreSQL SQLAlchemy URL; its schema is dropped and recreated")
    parser.add_argument("--gpus", type=int, default=800, help="fleet size (8 GPUs per node)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each kind, alternating")
    parser.add_argument("--checks", type=int, default=20_000, help="in-process credential checks of each kind")
    args = parser.parse_args()

    engine = make_engine(args.database_url)
    downgrade(engine, "base")
    upgrade(engine)
    fleet = _fleet_samples(args.gpus, STEADY_CYCLES * 10 / 3600)
    with engine.begin() as connection:
        create_partitions(connection, {to_epoch(cycle[0].timestamp) for cycle in next(iter(fleet.values()))})
    sessions = session_factory(engine)
    now = utc_now()
    with sessions.begin() as session:
        node_tokens = {node: create_node_token(session, node, now, actor=ACTOR)[1] for node in fleet}
        api_token = create_api_token(session, "viewer", now, actor=ACTOR)[1]
    shared = secrets.token_urlsafe()
    bodies = _bodies(fleet, 1)
    nodes = [node for _ in range(STEADY_CYCLES) for node in fleet]  # _bodies interleaves nodes, cycle by cycle
    backends = Backends(make_url(args.database_url).set(drivername="postgresql").render_as_string(hide_password=False))
    kinds = {"shared": [shared] * len(bodies), "node": [node_tokens[node] for node in nodes]}
    print(
        f"{len(fleet)} nodes × {STEADY_CYCLES} single-cycle POSTs of {GPUS_PER_NODE} readings, {args.clients} clients"
    )
    figures: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
    with serving(args.database_url, shared) as (base, server):
        http_run(base, shared, bodies[:200], args.clients, server, backends)  # warm-up
        for _ in range(args.repeat):
            for kind, tokens in kinds.items():
                run, rate = http_run(base, shared, bodies, args.clients, server, backends, tokens=tokens)
                figures[kind].append((rate, run.sender_us * GPUS_PER_NODE))
    print(f"{'token':<8} {'POST/s':>8} {'service CPU µs/POST':>20}")
    medians = {}
    for kind, runs in figures.items():
        rate, cpu = statistics.median(r for r, _ in runs), statistics.median(c for _, c in runs)
        medians[kind] = cpu
        print(f"{kind:<8} {rate:>8.0f} {cpu:>20.0f}")
    extra = medians["node"] - medians["shared"]
    print(f"node token: {extra:+.0f} µs of service CPU per POST ({medians['node'] / medians['shared']:.3f}× shared)")

    ingest, api = IngestAuth(sessions, shared), ApiAuth(sessions, shared)
    a_node_token = node_tokens[next(iter(fleet))]
    checks = {
        "ingest, shared token": lambda: ingest.holder(f"Bearer {shared}"),
        "ingest, node token": lambda: ingest.holder(f"Bearer {a_node_token}"),
        "API, FINOPS_API_TOKEN": lambda: api.principal(f"Bearer {shared}"),
        "API, API token": lambda: api.principal(f"Bearer {api_token}"),
    }
    print(f"\n{'check alone (in process)':<24} {'wall µs':>9} {'CPU µs':>8}")
    for name, check in checks.items():
        wall, cpu = per_check(check, args.checks)
        print(f"{name:<24} {wall:>9.1f} {cpu:>8.1f}")


if __name__ == "__main__":
    main()
