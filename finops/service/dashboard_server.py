"""Starting the Streamlit dashboard (``dashboards/app.py``): this process becomes ``streamlit run``."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import NoReturn

import dashboards
from finops.errors import FinopsError

DASHBOARD_DEPENDENCIES = ("streamlit", "altair", "pandas")
"""Top-level modules of the dashboard extra's packages."""


def require_dashboard_extra(command: str) -> None:
    """FinopsError naming the extra to install unless the dashboard extra's packages are importable, so ``command``
    fails at once instead of in Streamlit's child process."""
    missing = [name for name in DASHBOARD_DEPENDENCIES if importlib.util.find_spec(name) is None]
    if missing:
        raise FinopsError(
            f"gpu-finops {command} needs the dashboard extra ({', '.join(missing)} missing): "
            "pip install 'gpu-finops[dashboard]'"
        )


def dashboard_command(host: str, port: int) -> list[str]:
    """The ``streamlit run`` command line for the dashboard, headless, usage statistics off."""
    app_path = Path(dashboards.__file__).resolve().parent / "app.py"
    return [
        sys.executable, "-m", "streamlit", "run", str(app_path),
        "--server.address", host, "--server.port", str(port), "--server.headless", "true",
        "--browser.gatherUsageStats", "false", "--client.toolbarMode", "minimal",
    ]  # fmt: skip


def serve_dashboard(host: str, port: int, database_url: str | None = None) -> NoReturn:
    """Replace this process with Streamlit serving the dashboard (``os.execve``), so that a signal sent to it
    (Ctrl-C, ``docker stop``, a supervisor's SIGTERM) reaches Streamlit and leaves no orphan behind.
    ``database_url`` overrides the setting."""
    env = dict(os.environ)
    if database_url is not None:
        env["FINOPS_DATABASE_URL"] = database_url
    print(f"dashboard on http://{host}:{port} (Ctrl-C to stop)", flush=True)
    os.execve(sys.executable, dashboard_command(host, port), env)
