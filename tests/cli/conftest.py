"""Fixtures of the command-line tests: a CliRunner on a migrated database, and ``serve`` without its server."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from finops.cli import serve as serve_module


@pytest.fixture
def cli_env(engine, monkeypatch):  # type: ignore[no-untyped-def]
    """A CliRunner whose commands use the migrated ``engine``'s database, with no token setting from the host's
    environment (each test sets those it wants)."""
    monkeypatch.setenv("FINOPS_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    for name in ("FINOPS_INGEST_TOKEN", "FINOPS_INGEST_TOKEN_FILE", "FINOPS_API_TOKEN", "FINOPS_API_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


@pytest.fixture
def started(monkeypatch):  # type: ignore[no-untyped-def]
    """``serve``'s uvicorn.run replaced: the apps it would have served."""
    apps: list[object] = []
    monkeypatch.setattr(serve_module.uvicorn, "run", lambda app, **_: apps.append(app))
    return apps
