"""The test host: the repository root, the real third-party data folder, Debian programs the tests run."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NoReturn

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def shared_data_dir() -> Path:
    """The real third-party data folder: ``FINOPS_SHARED_DATA`` or ``../shared/data`` beside the clone."""
    configured = Path(os.environ.get("FINOPS_SHARED_DATA", "../shared/data"))
    return configured if configured.is_absolute() else (REPO_ROOT / configured).resolve()


def unavailable(message: str) -> NoReturn:
    """Skip the test because something ``.ci/run`` installs is missing (``message`` says what and how to get it);
    under ``CI=true``, where it is installed, fail it instead."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def debian_binary(name: str) -> Path:
    """Path of a program from a Debian package that ``.ci/run`` installs; skips without it, fails under CI=true."""
    found = shutil.which(name)
    if found is None:
        unavailable(f"{name} is not installed (Debian package installed by .ci/run)")
    return Path(found)
