"""Starting the Streamlit dashboard (``dashboards/app.py``) as a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dashboards


def dashboard_command(host: str, port: int) -> list[str]:
    """The ``streamlit run`` command line for the dashboard, headless, usage statistics off."""
    app_path = Path(dashboards.__file__).resolve().parent / "app.py"
    return [
        sys.executable, "-m", "streamlit", "run", str(app_path),
        "--server.address", host, "--server.port", str(port), "--server.headless", "true",
        "--browser.gatherUsageStats", "false", "--client.toolbarMode", "minimal",
    ]  # fmt: skip


def serve_dashboard(host: str, port: int, database_url: str | None = None) -> int:
    """Run the dashboard until interrupted; returns Streamlit's exit code. ``database_url`` overrides the setting."""
    env = dict(os.environ)
    if database_url is not None:
        env["FINOPS_DATABASE_URL"] = database_url
    print(f"dashboard on http://{host}:{port} (Ctrl-C to stop)", flush=True)
    process = subprocess.Popen(dashboard_command(host, port), env=env)
    try:
        return process.wait()
    except KeyboardInterrupt:
        process.terminate()
        return process.wait()
