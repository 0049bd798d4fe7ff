"""Running a benchmark's case in a child process that imports one checkout's code, so that two trees are measured
side by side in the same run.

The parent empties the benchmark's database before each run (:func:`recreate_database`: each tree migrates it with
its own migrations, which cannot read a schema a newer tree left) and starts the child (:func:`run_in_tree`); the
child, the same script with its ``--child`` option, first leaves only its tree on the path (:func:`leave_only_tree`)
and prints its figures as a JSON object, its last line of output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def leave_only_tree() -> None:
    """In the child: take this folder off ``sys.path`` (``benchmarks/collector.py`` would shadow the collector
    package), leaving the tree that ``PYTHONPATH`` names."""
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != HERE]


def recreate_database(url: str) -> None:
    """Empty the benchmark's database: drop and create it (PostgreSQL, through its ``postgres`` database), or delete
    its file (SQLite)."""
    from sqlalchemy import create_engine, make_url, text

    target = make_url(url)
    if target.get_backend_name() == "sqlite":
        Path(target.database or "").unlink(missing_ok=True)
        return
    admin = create_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{target.database}" WITH (FORCE)'))
        c.execute(text(f'CREATE DATABASE "{target.database}"'))
    admin.dispose()


def run_in_tree(tree: Path, script: str, args: list[str]) -> dict[str, Any]:
    """``python script ARGS`` with ``tree`` its working directory and its only code (``PYTHONPATH``); the JSON
    object it printed last. Raises :class:`subprocess.CalledProcessError` when the child fails."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, script, *args]
    out = subprocess.run(command, env=env, cwd=tree, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def timed(function: Callable[..., Any], seconds: dict[str, float], name: str) -> Callable[..., Any]:
    """``function``, adding the wall seconds of each call to ``seconds[name]`` (a step of the child's work timed
    apart, e.g. one that :func:`finops.service.scheduler.run_rollup` calls by name)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            seconds[name] += time.perf_counter() - began

    return call
