"""Starting the Streamlit dashboard (``dashboards/app.py``): this process becomes ``streamlit run``.

With an OpenID Connect provider configured (``FINOPS_DASHBOARD_OIDC_*``), Streamlit's own log-in (``st.login``,
Authlib) is switched on through an ``[auth]`` section of secrets, written to a file only this user can read and
named to Streamlit with ``--secrets.files``. Without one, the dashboard has no log-in and may only listen on a
loopback address (unless ``--insecure-no-login``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import secrets
import stat
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

import dashboards
from dashboards.access import is_loopback
from finops.errors import FinopsError
from finops.settings.dashboard import DashboardSettings

log = logging.getLogger(__name__)

DASHBOARD_DEPENDENCIES = ("streamlit", "altair", "pandas", "authlib")
"""Top-level modules of the dashboard extra's packages (Authlib: Streamlit's ``st.login``)."""


def require_dashboard_extra(command: str) -> None:
    """FinopsError naming the extra to install unless the dashboard extra's packages are importable, so ``command``
    fails at once instead of in Streamlit's child process."""
    missing = [name for name in DASHBOARD_DEPENDENCIES if importlib.util.find_spec(name) is None]
    if missing:
        raise FinopsError(
            f"gpu-finops {command} needs the dashboard extra ({', '.join(missing)} missing): "
            "pip install 'gpu-finops[dashboard]'"
        )


def check_listen_address(host: str, settings: DashboardSettings, insecure_no_login: bool) -> None:
    """FinopsError when the dashboard would serve every team's costs without a log-in on an address other machines
    reach: no OIDC provider configured, ``host`` not loopback and no ``insecure_no_login``."""
    if settings.oidc_enabled or insecure_no_login or is_loopback(host):
        return
    raise FinopsError(
        f"the dashboard has no log-in, so it listens on 127.0.0.1 only, not {host}: set "
        "FINOPS_DASHBOARD_OIDC_METADATA_URL (and the other FINOPS_DASHBOARD_OIDC_* settings) to require a log-in, "
        "or pass --insecure-no-login"
    )


def auth_section(settings: DashboardSettings, cookie_secret: str) -> dict[str, object]:
    """The ``[auth]`` section of Streamlit's secrets for the configured provider (``redirect_uri``,
    ``cookie_secret``, ``client_id``, ``client_secret``, ``server_metadata_url`` and ``client_kwargs`` with the
    scopes and prompt). FinopsError naming the settings that are missing or not URLs."""
    problems = []
    for name, value in (
        ("FINOPS_DASHBOARD_URL", settings.dashboard_url),
        ("FINOPS_DASHBOARD_OIDC_METADATA_URL", settings.dashboard_oidc_metadata_url),
    ):
        if not value.startswith(("https://", "http://")):
            problems.append(f"{name} must be an http(s) URL")
    if not settings.dashboard_oidc_client_id:
        problems.append("FINOPS_DASHBOARD_OIDC_CLIENT_ID is not set")
    if settings.dashboard_oidc_client_secret is None:
        problems.append("FINOPS_DASHBOARD_OIDC_CLIENT_SECRET (or its _FILE) is not set")
    if problems:
        raise FinopsError(f"dashboard log-in: {'; '.join(problems)}")
    assert settings.dashboard_oidc_client_secret is not None
    return {
        "redirect_uri": settings.redirect_uri,
        "cookie_secret": cookie_secret,
        "client_id": settings.dashboard_oidc_client_id,
        "client_secret": settings.dashboard_oidc_client_secret.get_secret_value(),
        "server_metadata_url": settings.dashboard_oidc_metadata_url,
        "client_kwargs": {"scope": settings.dashboard_oidc_scopes, "prompt": settings.dashboard_oidc_prompt},
    }


def cookie_secret(settings: DashboardSettings) -> str:
    """``FINOPS_DASHBOARD_COOKIE_SECRET``, or a random key for this start (logged: log-ins end at a restart)."""
    if settings.dashboard_cookie_secret is not None:
        return settings.dashboard_cookie_secret.get_secret_value()
    log.warning(
        "FINOPS_DASHBOARD_COOKIE_SECRET is not set: log-ins are signed with a random key of this start and end "
        "when the dashboard restarts (set it when several dashboard replicas serve the same URL)"
    )
    return secrets.token_urlsafe(32)


def toml_table(name: str, values: dict[str, object]) -> str:
    """``[name]`` and its ``key = "value"`` lines, with one level of nested tables (``[name.key]``) for dict
    values: strings only, written as TOML basic strings (JSON's escapes are TOML's, bar DEL)."""

    def line(key: str, value: object) -> str:
        text = json.dumps(str(value), ensure_ascii=False).replace("\x7f", "\\u007f")
        return f"{key} = {text}"

    flat = [line(key, value) for key, value in values.items() if not isinstance(value, dict)]
    nested = [
        "\n".join([f"[{name}.{key}]", *(line(k, v) for k, v in value.items())])
        for key, value in values.items()
        if isinstance(value, dict)
    ]
    return "\n\n".join(["\n".join([f"[{name}]", *flat]), *nested]) + "\n"


def private_directory(root: Path) -> Path:
    """``<root>/gpu-finops-<uid>``, made mode 0700 if missing. FinopsError when it exists but is a link, belongs to
    someone else or others may enter it (then a secret written there would not be private)."""
    directory = root / f"gpu-finops-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        directory.mkdir(mode=0o700)
    found = directory.lstat()
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        raise FinopsError(f"{directory} is not a directory of this user's alone (mode 0700): remove it and retry")
    return directory


def write_secrets(text: str, port: int, root: Path | None = None) -> Path:
    """Write Streamlit's secrets ``text`` to ``secrets-<port>.toml`` (mode 0600, replaced at each start on that
    port) in :func:`private_directory` of ``root`` (default: the temporary directory); returns its path."""
    path = private_directory(root or Path(tempfile.gettempdir())) / f"secrets-{port}.toml"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        os.fchmod(descriptor, 0o600)
        file.write(text)
    return path


def dashboard_command(host: str, port: int, secrets_file: Path | None = None) -> list[str]:
    """The ``streamlit run`` command line for the dashboard, headless, usage statistics off; its secrets (the
    ``[auth]`` section of the log-in) only from ``secrets_file`` when given."""
    app_path = Path(dashboards.__file__).resolve().parent / "app.py"
    command = [
        sys.executable, "-m", "streamlit", "run", str(app_path),
        "--server.address", host, "--server.port", str(port), "--server.headless", "true",
        "--browser.gatherUsageStats", "false", "--client.toolbarMode", "minimal",
    ]  # fmt: skip
    if secrets_file is not None:
        command += ["--secrets.files", str(secrets_file)]
    return command


def serve_dashboard(
    host: str, port: int, database_url: str | None = None, settings: DashboardSettings | None = None
) -> NoReturn:
    """Replace this process with Streamlit serving the dashboard (``os.execve``), so that a signal sent to it
    (Ctrl-C, ``docker stop``, a supervisor's SIGTERM) reaches Streamlit and leaves no orphan behind.
    ``database_url`` overrides the setting. With ``settings`` that configure an OIDC provider, the log-in is
    required (the secrets it needs written by :func:`write_secrets`); FinopsError when they are incomplete."""
    env = dict(os.environ)
    if database_url is not None:
        env["FINOPS_DATABASE_URL"] = database_url
    secrets_file = None
    if settings is not None and settings.oidc_enabled:
        section = auth_section(settings, cookie_secret(settings))
        secrets_file = write_secrets(toml_table("auth", section), port)
        print(f"dashboard log-in with {settings.dashboard_oidc_metadata_url}", flush=True)
    print(f"dashboard on http://{host}:{port} (Ctrl-C to stop)", flush=True)
    os.execve(sys.executable, dashboard_command(host, port, secrets_file), env)
