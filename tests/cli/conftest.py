"""Fixtures of the command-line tests: the CLI on a migrated database, and ``serve`` without its server."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from finops.cli import serve as serve_module


@pytest.fixture
def cli_env(engine, monkeypatch):  # type: ignore[no-untyped-def]
    """A CliRunner whose commands use the migrated test database, with no token and no TLS file in the
    environment."""
    monkeypatch.setenv("FINOPS_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    tokens = ("INGEST_TOKEN", "INGEST_TOKEN_FILE", "API_TOKEN", "API_TOKEN_FILE")
    for variable in (*tokens, "TLS_CERT_FILE", "TLS_KEY_FILE"):
        monkeypatch.delenv(f"FINOPS_{variable}", raising=False)
    return CliRunner()


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """``serve``'s HTTP server (:func:`finops.service.http_server.serve_http`, as :mod:`finops.cli.serve` calls it)
    replaced: the uvicorn options of each call, the app as ``app`` (the scheduled jobs are not started)."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(
        serve_module, "serve_http", lambda app, stopping, started, **kwargs: calls.append({"app": app, **kwargs})
    )
    return calls
