"""Shared test fixtures: the real-data folder and the databases every database test runs on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """The real third-party data folder: ``FINOPS_SHARED_DATA`` or ``../shared/data`` beside the clone."""
    configured = Path(os.environ.get("FINOPS_SHARED_DATA", "../shared/data"))
    return configured if configured.is_absolute() else (REPO_ROOT / configured).resolve()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path of ``../shared/data``; skips the test when it is absent, fails under ``CI=true``."""
    path = shared_data_dir()
    if not (path / "INDEX.md").is_file():
        message = f"real data folder {path} is missing (set FINOPS_SHARED_DATA to its location)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path
