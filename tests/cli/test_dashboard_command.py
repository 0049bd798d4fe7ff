"""`gpu-finops dashboard`: without a log-in it refuses a non-loopback address; with an OpenID Connect provider it
writes Streamlit's ``[auth]`` secrets to a file of its user's alone and names it to ``streamlit run``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from finops.errors import FinopsError
from finops.service.dashboard_server import (
    auth_section,
    check_listen_address,
    cookie_secret,
    dashboard_command,
    private_directory,
    toml_table,
    write_secrets,
)
from finops.settings.dashboard import DashboardSettings

OIDC = {
    "dashboard_url": "https://finops.example.org/",
    "dashboard_oidc_metadata_url": "https://idp.example.org/realms/acme/.well-known/openid-configuration",
    "dashboard_oidc_client_id": "gpu-finops",
    "dashboard_oidc_client_secret": 'se"cr\\et \x7f é',
}


def _settings(**values: object) -> DashboardSettings:
    return DashboardSettings.model_validate(values)


def test_without_a_login_a_non_loopback_host_is_refused_in_one_line(tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("FINOPS_")}
    done = subprocess.run(
        [sys.executable, "-m", "finops.cli", "dashboard", "--host", "0.0.0.0"],
        capture_output=True, text=True, timeout=120, env={**environment, "FINOPS_DATA_DIR": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: the dashboard has no log-in, so it listens on 127.0.0.1 only, not 0.0.0.0: set "
        "FINOPS_DASHBOARD_OIDC_METADATA_URL (and the other FINOPS_DASHBOARD_OIDC_* settings) to require a log-in, "
        "or pass --insecure-no-login"
    ]


def test_loopback_or_a_login_or_the_insecure_option_may_listen() -> None:
    check_listen_address("127.0.0.1", _settings(), insecure_no_login=False)
    check_listen_address("::1", _settings(), insecure_no_login=False)
    check_listen_address("0.0.0.0", _settings(), insecure_no_login=True)
    check_listen_address("0.0.0.0", _settings(**OIDC), insecure_no_login=False)
    with pytest.raises(FinopsError, match=r"not 10\.1\.2\.3"):
        check_listen_address("10.1.2.3", _settings(), insecure_no_login=False)


def test_the_auth_secrets_written_privately_and_read_back_as_toml(tmp_path: Path) -> None:
    settings = _settings(**OIDC, dashboard_oidc_scopes="openid profile groups", dashboard_oidc_prompt="login")
    path = write_secrets(toml_table("auth", auth_section(settings, "cookie-key")), 8501, tmp_path)
    assert path == tmp_path / f"gpu-finops-{os.getuid()}" / "secrets-8501.toml"
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert tomllib.loads(path.read_text()) == {
        "auth": {
            "redirect_uri": "https://finops.example.org/oauth2callback",
            "cookie_secret": "cookie-key",
            "client_id": "gpu-finops",
            "client_secret": 'se"cr\\et \x7f é',
            "server_metadata_url": OIDC["dashboard_oidc_metadata_url"],
            "client_kwargs": {"scope": "openid profile groups", "prompt": "login"},
        }
    }
    assert dashboard_command("127.0.0.1", 8501, path)[-2:] == ["--secrets.files", str(path)]
    assert "--secrets.files" not in dashboard_command("127.0.0.1", 8501)
    shorter = toml_table("auth", auth_section(_settings(**OIDC), "k"))
    assert write_secrets(shorter, 8501, tmp_path) == path and path.read_text() == shorter, "replaced at each start"


def test_a_shared_secrets_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / f"gpu-finops-{os.getuid()}").mkdir(mode=0o755)
    with pytest.raises(FinopsError, match="not a directory of this user's alone"):
        private_directory(tmp_path)


def test_incomplete_provider_settings_name_what_is_missing() -> None:
    settings = _settings(dashboard_oidc_metadata_url="idp.example.org", dashboard_admin_groups="a, b ,,c")
    assert settings.dashboard_admin_groups == ["a", "b", "c"]
    with pytest.raises(FinopsError) as refused:
        auth_section(settings, "k")
    assert str(refused.value) == (
        "dashboard log-in: FINOPS_DASHBOARD_URL must be an http(s) URL; FINOPS_DASHBOARD_OIDC_METADATA_URL must be "
        "an http(s) URL; FINOPS_DASHBOARD_OIDC_CLIENT_ID is not set; FINOPS_DASHBOARD_OIDC_CLIENT_SECRET (or its "
        "_FILE) is not set"
    )


def test_the_cookie_secret_is_the_setting_or_random_per_start(caplog: pytest.LogCaptureFixture) -> None:
    assert cookie_secret(_settings(dashboard_cookie_secret="kept")) == "kept"
    with caplog.at_level(logging.WARNING):
        first, second = cookie_secret(_settings()), cookie_secret(_settings())
    assert first != second and len(first) >= 32
    assert "end when the dashboard restarts" in caplog.text and first not in caplog.text


def test_the_group_lists_come_comma_separated_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FINOPS_DASHBOARD_VIEWER_GROUPS", "finops-viewers, finance")
    assert DashboardSettings().dashboard_viewer_groups == ["finops-viewers", "finance"]
