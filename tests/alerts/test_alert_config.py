"""The alert rules file and the alert settings: defaults, overrides, errors naming file and field, secrets."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import pytest

from alerts.config import AlertConfig, AlertConfigError, load_config, parse_duration
from alerts.service import AlertService
from finops.settings.combined import Settings

RULES = """
timers:
  group_wait: 10s
routes:
  - team: vision
    slack: vision
    email: [lead@example.org, ops@example.org]
    min_severity: warning
  - name: nlp-pages
    match: ['team="nlp"', 'severity="critical"']
    slack: [nlp-oncall]
    repeat_interval: 1h
default_route:
  email: gpu-ops@example.org
rules:
  idle-gpu: {severity: critical}
  throttling: {for: 10m}
  data-quality: {max_unknown_job_share: 0.02, max_no_reading_share: 0.2, period: 12h}
  budget-50: {enabled: false}
"""


def test_defaults_in_code() -> None:
    config = AlertConfig()
    assert config.timers.group_wait == timedelta(seconds=30)
    assert config.timers.group_interval == timedelta(minutes=5)
    assert config.timers.repeat_interval == timedelta(hours=4)
    assert config.rules.get("budget-100").severity == "critical"
    assert config.rules.get("budget-80").send_resolved is False
    assert config.rules.throttling.for_ == timedelta(minutes=5)
    assert config.rules.collector_silent.intervals == 3
    assert config.route_for({"team": "vision", "rule": "idle-gpu"})[0] == "default"
    assert config.timers_for(config.default_route, "idle-gpu").repeat_interval == timedelta(hours=4)
    assert config.timers_for(config.default_route, "budget-80").repeat_interval > timedelta(days=3650), "never"


def test_a_rules_file_overrides_routes_timers_and_rules(tmp_path: Path) -> None:
    path = tmp_path / "alerts.yaml"
    path.write_text(RULES)
    config = load_config(path)
    assert config.timers.group_wait == timedelta(seconds=10)
    assert config.timers.group_interval == timedelta(minutes=5), "the rest keep their defaults"
    name, route = config.route_for({"team": "vision", "rule": "idle-gpu", "severity": "warning"})
    assert (name, route.slack, route.email) == ("team=vision", ["vision"], ["lead@example.org", "ops@example.org"])
    assert config.route_for({"team": "vision", "severity": "info"})[0] == "default", "below min_severity"
    assert config.route_for({"team": "nlp", "severity": "critical"})[0] == "nlp-pages"
    assert config.route_for({"team": "nlp", "severity": "warning"})[0] == "default"
    assert config.default_route.email == ["gpu-ops@example.org"]
    assert config.timers_for(config.route_named("nlp-pages"), "idle-gpu").repeat_interval == timedelta(hours=1)
    assert config.rules.get("idle-gpu").severity == "critical"
    assert config.rules.throttling.for_ == timedelta(minutes=10)
    assert config.rules.data_quality.period == timedelta(hours=12)
    assert (config.rules.data_quality.max_unknown_job_share, config.rules.data_quality.max_no_reading_share) == (
        0.02,
        0.2,
    )
    assert config.rules.get("budget-50").enabled is False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "routes:\n  - team: vision\n    email: [ok@example.org, not-an-address]\n",
            r"routes\[0\]\.email: .*not-an-address",
        ),
        ("rules:\n  idle-gpu: {severity: loud}\n", r"rules\.idle-gpu\.severity"),
        ("rules:\n  idle-gpu: {sevrity: info}\n", r"rules\.idle-gpu\.sevrity: Extra inputs"),
        ("rules:\n  no-such-rule: {}\n", r"rules\.no-such-rule"),
        (
            "rules:\n  data-quality: {max_unattributed_share: 0.5}\n",
            r"rules\.data-quality: .*max_unattributed_share is no longer a setting: .*set max_unknown_job_share and "
            "max_no_reading_share instead",
        ),
        ("timers:\n  group_wait: soon\n", r"timers\.group_wait: .*'soon' is not a duration"),
        ("routes:\n  - match: ['team=~(']\n", r"routes\[0\]\.match: .*invalid regular expression"),
        ("routes: [\n", r"line \d+.*not valid YAML"),
    ],
)
def test_errors_name_the_file_and_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "alerts.yaml"
    path.write_text(text)
    with pytest.raises(AlertConfigError, match=message) as raised:
        load_config(path)
    assert str(raised.value).startswith(str(path))


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(AlertConfigError, match=r"absent\.yaml: No such file"):
        load_config(tmp_path / "absent.yaml")


def test_durations() -> None:
    assert parse_duration("90s") == timedelta(seconds=90)
    assert parse_duration("1h30m") == timedelta(hours=1, minutes=30)
    assert parse_duration("1d") == timedelta(days=1)
    assert parse_duration(45) == timedelta(seconds=45)
    assert parse_duration("2w1d12h") == timedelta(days=15, hours=12), "weeks, as Prometheus writes them"
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("30m1h")  # units largest first, as Prometheus reads them
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("1234567s")  # at most 6 digits a unit
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("5 minutes")


WEBHOOK = "https://hooks.slack.com/services/T0001/B0001/very-secret-token"


def test_secrets_from_settings_or_files_never_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FINOPS_ALERT_SLACK_WEBHOOKS", "FINOPS_ALERT_SMTP_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"{name}_FILE", raising=False)
    hooks = tmp_path / "webhooks.json"
    hooks.write_text(f'{{"vision": "{WEBHOOK}"}}\n')
    password = tmp_path / "smtp-password"
    password.write_text("mail-secret\n")
    monkeypatch.setenv("FINOPS_ALERT_SLACK_WEBHOOKS_FILE", str(hooks))
    monkeypatch.setenv("FINOPS_ALERT_SMTP_PASSWORD_FILE", str(password))
    settings = Settings()
    assert settings.slack_webhooks["vision"].get_secret_value() == WEBHOOK
    assert settings.alert_smtp_password is not None and settings.alert_smtp_password.get_secret_value() == "mail-secret"
    shown = repr(settings) + str(settings)
    assert WEBHOOK not in shown and "very-secret" not in shown and "mail-secret" not in shown

    monkeypatch.setenv("FINOPS_ALERT_SMTP_PASSWORD", "mail-secret")
    with pytest.raises(ValueError, match="set FINOPS_ALERT_SMTP_PASSWORD or FINOPS_ALERT_SMTP_PASSWORD_FILE, not both"):
        Settings()
    monkeypatch.delenv("FINOPS_ALERT_SMTP_PASSWORD")
    monkeypatch.setenv("FINOPS_ALERT_SLACK_WEBHOOKS", f'{{"ops": "{WEBHOOK}"}}')
    with pytest.raises(ValueError, match="FINOPS_ALERT_SLACK_WEBHOOKS_FILE, not both"):
        Settings()


def test_a_malformed_webhook_setting_does_not_echo_the_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FINOPS_ALERT_SLACK_WEBHOOKS_FILE", raising=False)
    monkeypatch.setenv("FINOPS_ALERT_SLACK_WEBHOOKS", f'{{"ops": "{WEBHOOK}"')
    with pytest.raises(ValueError) as raised:
        Settings()
    assert "very-secret" not in str(raised.value)
    hooks = tmp_path / "webhooks.json"
    hooks.write_text(f'["{WEBHOOK}"]')
    monkeypatch.delenv("FINOPS_ALERT_SLACK_WEBHOOKS")
    monkeypatch.setenv("FINOPS_ALERT_SLACK_WEBHOOKS_FILE", str(hooks))
    with pytest.raises(ValueError, match=r"webhooks\.json: not a JSON object of name → URL") as raised:
        Settings()
    assert "very-secret" not in str(raised.value)


def test_the_service_is_built_from_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    rules = tmp_path / "alerts.yaml"
    rules.write_text(RULES)
    monkeypatch.delenv("FINOPS_ALERT_SLACK_WEBHOOKS_FILE", raising=False)
    monkeypatch.delenv("FINOPS_ALERT_SMTP_PASSWORD_FILE", raising=False)
    monkeypatch.setenv("FINOPS_ALERT_RULES", str(rules))
    monkeypatch.setenv("FINOPS_ALERT_SLACK_WEBHOOKS", f'{{"vision": "{WEBHOOK}"}}')
    monkeypatch.setenv("FINOPS_ALERT_SMTP_HOST", "smtp.example.org")
    monkeypatch.setenv("FINOPS_ALERT_SMTP_USERNAME", "alerts")
    monkeypatch.setenv("FINOPS_ALERT_SMTP_PASSWORD", "mail-secret")
    monkeypatch.setenv("FINOPS_ALERT_WEBHOOK_HOSTS", '["hooks.slack.com", "hooks.example.org"]')
    service = AlertService.from_settings(Settings())
    assert service.config.route_named("team=vision").slack == ["vision"]
    assert service.channels.smtp is not None and service.channels.smtp.password == "mail-secret"
    assert service.channels.smtp.tls == "starttls" and service.channels.smtp.port == 587
    assert service.channels.policy.allowed_hosts == frozenset({"hooks.slack.com", "hooks.example.org"})
    assert WEBHOOK in service.channels.secrets() and "mail-secret" in service.channels.secrets()
    assert all("very-secret" not in r.getMessage() and "mail-secret" not in r.getMessage() for r in caplog.records)
