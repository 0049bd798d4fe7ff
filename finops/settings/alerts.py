"""Settings of the messages the service sends: alert channels and delivery, and the nudges to users."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from finops.savings.nudges import NUDGE_KINDS
from finops.settings.group import SettingsGroup


class AlertmanagerTarget(BaseModel):
    """One Alertmanager that alerts are posted to (its API v2): the base URL (``https://am.example:9093``, with the
    route prefix if it has one), optional credentials read from files at each request (a bearer token, or a user
    name and a password file: HTTP basic auth; https only) and a PEM CA bundle its certificate is checked against.
    ValueError for a URL that is not http(s), or that carries credentials, a query or a fragment."""

    model_config = ConfigDict(extra="forbid")

    url: str
    bearer_token_file: Path | None = None
    username: str | None = None
    password_file: Path | None = None
    ca_file: Path | None = None

    @field_validator("url")
    @classmethod
    def _plain_base_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("an Alertmanager URL is http:// or https:// and a host")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError("an Alertmanager URL has no credentials, query or fragment (credentials are files)")
        return value

    @model_validator(mode="after")
    def _one_credential_over_tls(self) -> typing.Self:
        if self.bearer_token_file is not None and (self.username is not None or self.password_file is not None):
            raise ValueError("set bearer_token_file or username and password_file, not both")
        if (self.username is None) != (self.password_file is None):
            raise ValueError("basic auth needs both username and password_file")
        credentials = self.bearer_token_file is not None or self.password_file is not None
        if credentials and urlsplit(self.url).scheme != "https":
            raise ValueError("credentials are sent to an https Alertmanager URL only")
        return self


class AlertSettings(SettingsGroup):
    """Alert rules, Slack, e-mail and Alertmanager channels, and the delivery worker."""

    alert_rules: Path | None = Field(
        None, description="YAML file of alert rules and routes (format: `docs/alerts.md`); default: the rules in code."
    )
    alert_slack_webhooks: dict[str, SecretStr] | None = Field(
        None, description='Slack incoming webhooks by name, JSON: `{"vision": "https://hooks.slack.com/services/…"}`.'
    )
    alert_slack_webhooks_file: Path | None = Field(None, description="File holding the Slack webhooks JSON object.")
    alert_webhook_hosts: list[str] = Field(
        default_factory=lambda: ["hooks.slack.com"], description="Host names webhooks may point to (JSON list)."
    )
    alert_webhook_allow_private: bool = Field(
        False, description="Allow webhooks on loopback, link-local or private addresses (and plain http there)."
    )
    alert_alertmanagers: dict[str, AlertmanagerTarget] = Field(
        default_factory=dict,
        description='Alertmanagers by name, JSON: `{"site": {"url": "https://am.example:9093"}}`; each may add '
        "`bearer_token_file`, or `username` and `password_file`, and `ca_file` (`docs/alerts.md`).",
    )
    alert_smtp_host: str = Field("", description="SMTP server for alert e-mail; empty: e-mail deliveries are refused.")
    alert_smtp_port: int = Field(587, gt=0, lt=65536, description="SMTP port (587 STARTTLS, 465 implicit TLS).")
    alert_smtp_tls: Literal["starttls", "implicit", "none"] = Field(
        "starttls", description="`starttls` (required), `implicit`, or `none` (a local relay; no credentials sent)."
    )
    alert_smtp_sender: str = Field("gpu-finops@localhost", description="From address of alert e-mail.")
    alert_smtp_username: str | None = Field(None, description="SMTP AUTH user name.")
    alert_smtp_password: SecretStr | None = Field(None, description="SMTP AUTH password.")
    alert_smtp_password_file: Path | None = Field(None, description="File holding the SMTP password.")
    alert_smtp_ca_file: Path | None = Field(
        None, description="PEM CA bundle the SMTP server's certificate is checked against; default: system store."
    )
    alert_dashboard_url: str = Field(
        "http://127.0.0.1:8501", description="Base URL of the dashboard, for the links in alert messages."
    )
    alert_delivery_poll_seconds: float = Field(
        5.0, gt=0, description="How often the delivery worker sends due messages (and dispatches due groups)."
    )
    alert_delivery_deadline_seconds: int = Field(
        3600, gt=0, description="A message not delivered this long after it was queued is recorded as failed."
    )
    alert_outbox_retention_days: int = Field(
        90,
        ge=1,
        le=3660,
        description="Days the alert outbox keeps a delivered, failed or refused message (`alerts deliveries`, "
        "`alerts retry`) before the scheduler removes it; pending messages are kept.",
    )

    @property
    def slack_webhooks(self) -> dict[str, SecretStr]:
        """The configured Slack webhooks by name (empty when none)."""
        return dict(self.alert_slack_webhooks or {})


_DOMAIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+")


def email_domain(value: str) -> str:
    """An e-mail domain without a leading ``@`` (``"@example.edu"`` and ``"example.edu"`` are alike); ValueError for
    text that is not a domain name. Empty stays empty (no domain)."""
    domain = value.strip().removeprefix("@")
    if domain and not _DOMAIN.fullmatch(domain):
        raise ValueError(f"{value!r} is not a domain name such as example.edu")
    return domain


class NudgeSettings(SettingsGroup):
    """Nudges: messages to the users whose jobs waste GPUs, with the jobs, their cost and the fix, sent through the
    alert outbox (docs/nudges.md). Defaults are Princeton's Job Defense Shield's (JDS), cited per setting."""

    nudge_schedule_seconds: int = Field(
        3600,
        ge=0,
        description="How often `serve` and `scheduler` look for nudges due (and queue them); 0: not scheduled "
        "(`gpu-finops nudges` still sends on demand).",
    )
    nudge_kinds: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(NUDGE_KINDS),
        description="The kinds of nudge sent, comma-separated: " + ", ".join(f"`{k}`" for k in NUDGE_KINDS) + ".",
    )
    nudge_period_days: float = Field(
        7, gt=0, description="Days of the ledger the nudges about finished work read (JDS `--days`, default 7)."
    )
    nudge_repeat_days: float = Field(
        7,
        gt=0,
        description="A user gets at most one message per kind of nudge this often (JDS: one e-mail per user and "
        "alert every `--days`, default 7).",
    )
    nudge_idle_running_minutes: int = Field(
        60,
        gt=0,
        description="`idle-running-job`: a running job with a GPU idle (`FINOPS_IDLE_THRESHOLD_RATIO`) this long "
        "(JDS cancel-zero-gpu-jobs `first_warning_minutes: 60`).",
    )
    nudge_zero_util_gpu_hours: float = Field(
        24,
        ge=0,
        description="`zero-util-gpu-hours`: a user's GPU-hours at 0 % over the period from which they are told "
        "(JDS zero-util-gpu-hours `gpu_hours_threshold_user: 24`).",
    )
    nudge_low_efficiency_ratio: float = Field(
        0.25,
        ge=0,
        le=1,
        description="`low-gpu-efficiency`: a user's mean GPU utilisation over the period at or below this "
        "(JDS low-gpu-efficiency `eff_thres_pct: 25`).",
    )
    nudge_low_efficiency_gpu_hours: float = Field(
        50,
        ge=0,
        description="`low-gpu-efficiency`: … over more than this many GPU-hours (JDS `absolute_thres_hours: 50`).",
    )
    nudge_mig_max_utilization_ratio: float = Field(
        0.20,
        ge=0,
        le=1,
        description="`mig-candidate`: a one-GPU job with a mean utilisation above 0 and at or below this "
        "(JDS gpu-model-too-powerful `gpu_util_threshold: 20`).",
    )
    nudge_mig_max_memory_gib: float = Field(
        10,
        gt=0,
        description="`mig-candidate`: … whose memory peak is at most this many GiB "
        "(JDS gpu-model-too-powerful `gpu_mem_usage_max: 10`, GB of 1024³ bytes).",
    )
    nudge_inefficient_gpu_hours: float = Field(
        24,
        ge=0,
        description="`busy-but-inefficient`: a user's GPU-hours of busy-but-inefficient jobs (utilisation and SM "
        "activity: `FINOPS_EFFICIENCY_*`) over the period from which they are told (as `zero-util-gpu-hours`'s "
        "default: a day of one GPU; no JDS counterpart).",
    )
    nudge_email_domain: str = Field(
        "",
        description="E-mail domain of users not in the recipients file: user `alice` is `alice@<domain>` "
        "(JDS `email-domain-name`); empty: none.",
    )
    nudge_recipients: Path | None = Field(
        None,
        description="YAML file of users' own addresses (e-mail, Slack webhook and member ID) and of the targets "
        "every nudge is copied to (format: `docs/nudges.md`).",
    )

    @field_validator("nudge_kinds", mode="before")
    @classmethod
    def _kinds(cls, value: object) -> object:
        """``"zero-util-gpu-hours, mig-candidate"`` → a list; each must be a kind of nudge."""
        kinds = [item.strip() for item in value.split(",") if item.strip()] if isinstance(value, str) else value
        for kind in kinds if isinstance(kinds, list) else []:
            if kind not in NUDGE_KINDS:
                raise ValueError(f"{kind!r} is not a kind of nudge ({', '.join(NUDGE_KINDS)})")
        return kinds

    @field_validator("nudge_email_domain")
    @classmethod
    def _domain(cls, value: str) -> str:
        return email_domain(value)
