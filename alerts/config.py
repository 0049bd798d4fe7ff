"""Alert rules and routing: defaults in code, overridable by a YAML file (``FINOPS_ALERT_RULES``).

The file (every key optional; unknown keys are errors)::

    timers:                       # Alertmanager's route timers, for every route unless it sets its own
      group_wait: 30s             # a new group waits this long before its first message
      group_interval: 5m          # then is looked at again this often (new or resolved alerts)
      repeat_interval: 4h         # a group still firing, unchanged, is sent again this often
    routes:                       # tried in order; the first that matches an alert takes it
      - team: vision              # shorthand for the matcher team="vision"
        match: ['rule=~"idle-gpu|throttling"']   # more label matchers (Alertmanager syntax), all must match
        min_severity: warning     # info < warning < critical; alerts below it fall through to the next route
        slack: [vision]           # names of webhooks in FINOPS_ALERT_SLACK_WEBHOOKS (never URLs here)
        email: [lead@example.org]
        alertmanager: [site]      # names in FINOPS_ALERT_ALERTMANAGERS: each alert as it is, ungrouped (below)
        group_by: [team, rule]    # labels that make a notification group (default team, rule)
    default_route:                # alerts no route took
      slack: [ops]
      email: [gpu-ops@example.org]
    rules:
      idle-gpu: {severity: warning}
      throttling: {for: 5m}
      collector-silent: {intervals: 3, severity: critical}
      data-quality: {max_unknown_job_share: 0.01, max_no_reading_share: 0.05, period: 1d}
      budget-80: {enabled: false}

Durations are seconds (a number) or Prometheus-style text (``90s``, ``5m``, ``1h30m``, ``1d``). Every rule has
``enabled``, ``severity``, ``send_resolved`` (whether the end of the condition is announced) and
``repeat_interval`` (overrides the route's; ``never``: one message per alert). Budget and spend-anomaly alerts
are facts, not conditions: by default they are sent once and end silently. Errors name the file and the field
(``alerts.yaml: routes[0].email[1]: …``).

A team's monthly showback statement goes to the first route that matches the labels ``team="<team>"`` and
``rule="showback"``, whatever its ``min_severity`` (:meth:`AlertConfig.showback_route`): e-mail recipients get the
whole statement, Slack webhooks a summary with a link; ``match: ['rule!="showback"']`` keeps statements off a route.

A route's Alertmanagers get the route's alerts themselves, not its group messages: every alert the route takes,
firing or lately resolved, after every evaluation (:mod:`alerts.alertmanager`); grouping, timers, silences and
inhibition of those alerts are then Alertmanager's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from alerts.dispatch import DEFAULT_GROUP_BY, Timers
from alerts.matchers import Matcher, parse_matcher
from finops.errors import FinopsError
from finops.timeutil import parse_duration as parse_text_duration

SEVERITIES = ("info", "warning", "critical")
Severity = Literal["info", "warning", "critical"]


M = TypeVar("M", bound=BaseModel)


class AlertConfigError(FinopsError, ValueError):
    """A configuration file of the alerts package (the rules file, the nudge recipients file) is unreadable or
    invalid; the message names the file and the field."""


def parse_duration(value: object) -> object:
    """``90``, ``"90s"``, ``"5m"``, ``"1h30m"``, ``"1d"`` → :class:`~datetime.timedelta` (text as
    :func:`finops.timeutil.parse_duration` reads it); others are left to pydantic to refuse. ValueError for text that
    is not a duration."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return timedelta(seconds=value)
    if isinstance(value, str):
        return parse_text_duration(value)
    return value


Duration = Annotated[timedelta, BeforeValidator(parse_duration), Field(ge=timedelta(0))]


def listify(value: object) -> object:
    """One text where a list is expected, as that list of one (``email: a@b`` is ``email: [a@b]``)."""
    return [value] if isinstance(value, str) else value


TextList = Annotated[list[str], BeforeValidator(listify)]
"""A list of texts that may be written as one text."""


def email_addresses(addresses: list[str]) -> list[str]:
    """``addresses`` unchanged; ValueError naming the first that is not an e-mail address (one ``@``, no space,
    comma or angle bracket: a bare address, as a recipient list joins them)."""
    for address in addresses:
        if not re.fullmatch(r"[^@\s,<>]+@[^@\s,<>]+", address):
            raise ValueError(f"{address!r} is not an e-mail address")
    return addresses


class Strict(BaseModel):
    """A part of a configuration file: unknown keys are errors, fields may be given by their alias."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class TimersConfig(Strict):
    """Alertmanager's route timers."""

    group_wait: Duration = timedelta(seconds=30)
    group_interval: Duration = Field(timedelta(minutes=5), gt=timedelta(0))
    repeat_interval: Duration = Field(timedelta(hours=4), gt=timedelta(0))


class RouteConfig(Strict):
    """Where a set of alerts goes: matchers (``team`` is ``team="…"``), a minimum severity, the Slack webhooks
    (by name), e-mail recipients and Alertmanagers (by name), the grouping labels and optional timers of its own."""

    name: str = ""
    team: str | None = None
    match: list[str] = Field(default_factory=list)
    min_severity: Severity = "info"
    slack: TextList = Field(default_factory=list)
    email: TextList = Field(default_factory=list)
    alertmanager: TextList = Field(default_factory=list)
    group_by: list[str] = Field(default_factory=lambda: list(DEFAULT_GROUP_BY))
    group_wait: Duration | None = None
    group_interval: Duration | None = None
    repeat_interval: Duration | None = None

    @field_validator("match")
    @classmethod
    def _matchers_parse(cls, value: list[str]) -> list[str]:
        for text in value:
            parse_matcher(text)
        return value

    @field_validator("email")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        return email_addresses(value)

    def matchers(self) -> tuple[Matcher, ...]:
        """The route's label matchers, ``team`` first."""
        found = [Matcher("team", "=", self.team)] if self.team is not None else []
        return (*found, *(parse_matcher(text) for text in self.match))

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an alert with ``labels`` (``severity`` among them) is taken by this route."""
        severity = labels.get("severity", "info")
        rank = SEVERITIES.index(severity) if severity in SEVERITIES else 0
        return rank >= SEVERITIES.index(self.min_severity) and all(m.matches(labels) for m in self.matchers())

    def timers(self, defaults: TimersConfig) -> Timers:
        """This route's timers, each falling back to ``defaults``."""
        return Timers(
            group_wait=self.group_wait if self.group_wait is not None else defaults.group_wait,
            group_interval=self.group_interval if self.group_interval is not None else defaults.group_interval,
            repeat_interval=self.repeat_interval if self.repeat_interval is not None else defaults.repeat_interval,
        )


class RuleConfig(Strict):
    """What every rule has: on/off, severity, whether resolution is announced, its own repeat interval."""

    enabled: bool = True
    severity: Severity = "warning"
    send_resolved: bool = True
    repeat_interval: Duration | Literal["never"] | None = None


class EventRuleConfig(RuleConfig):
    """A rule fed by :mod:`finops.analysis.events`: a fact, sent once and ended silently by default."""

    send_resolved: bool = False
    repeat_interval: Duration | Literal["never"] | None = "never"


class ThrottlingConfig(RuleConfig):
    """Thermal or power clocks-event reasons active on an allocated GPU for ``for`` (default 5 min)."""

    for_: Duration = Field(timedelta(minutes=5), alias="for")


class SilenceConfig(RuleConfig):
    """No readings for ``intervals`` × the collector interval (``FINOPS_COLLECTOR_INTERVAL_SECONDS``)."""

    severity: Severity = "critical"
    intervals: float = Field(3, gt=0)


class DataQualityConfig(RuleConfig):
    """Over the last ``period``, as shares of its in-service GPU time: the GPU time that ran jobs no import knows
    above ``max_unknown_job_share``, or the GPU time with no reading at all (silent or missing collectors) above
    ``max_no_reading_share``. GPU time no job held (idle capacity) is normal and never fires it; a share of 1 turns
    its part off."""

    max_unknown_job_share: float = Field(0.01, ge=0, le=1)
    max_no_reading_share: float = Field(0.05, ge=0, le=1)
    period: Duration = Field(timedelta(days=1), gt=timedelta(0))

    @model_validator(mode="before")
    @classmethod
    def _no_unattributed_share(cls, data: Any) -> Any:
        """Refuse the former ``max_unattributed_share`` with what replaced it, not as a mere unknown key."""
        if isinstance(data, dict) and "max_unattributed_share" in data:
            raise ValueError(
                "max_unattributed_share is no longer a setting: GPU time no job held is idle capacity, normal, and "
                "no longer fires the alert; set max_unknown_job_share and max_no_reading_share instead"
            )
        return data


class RulesConfig(Strict):
    """Every rule by name."""

    budget_50: EventRuleConfig = Field(EventRuleConfig(severity="info"), alias="budget-50")
    budget_80: EventRuleConfig = Field(EventRuleConfig(severity="warning"), alias="budget-80")
    budget_100: EventRuleConfig = Field(EventRuleConfig(severity="critical"), alias="budget-100")
    budget_forecast: EventRuleConfig = Field(EventRuleConfig(severity="warning"), alias="budget-forecast")
    spend_anomaly: EventRuleConfig = Field(EventRuleConfig(severity="warning"), alias="spend-anomaly")
    idle_gpu: RuleConfig = Field(RuleConfig(severity="warning"), alias="idle-gpu")
    throttling: ThrottlingConfig = Field(ThrottlingConfig(severity="warning"), alias="throttling")
    collector_silent: SilenceConfig = Field(SilenceConfig(), alias="collector-silent")
    gpu_lost: SilenceConfig = Field(SilenceConfig(), alias="gpu-lost")
    data_quality: DataQualityConfig = Field(DataQualityConfig(severity="warning"), alias="data-quality")

    def get(self, rule: str) -> RuleConfig:
        """The configuration of rule ``rule`` (its name as in the file). KeyError for an unknown rule."""
        field = rule.replace("-", "_")
        if field not in type(self).model_fields:
            raise KeyError(rule)
        value: RuleConfig = getattr(self, field)
        return value


RULE_NAMES = tuple(str(f.alias) for f in RulesConfig.model_fields.values())
"""Every rule's name, as alerts carry it in their ``rule`` label."""
SHOWBACK_RULE = "showback"
"""The ``rule`` label a team's monthly statement is routed by (:meth:`AlertConfig.showback_route`); not a rule."""


class AlertConfig(Strict):
    """Rules, routes and timers (module docstring: the file format)."""

    timers: TimersConfig = TimersConfig()
    routes: list[RouteConfig] = Field(default_factory=list)
    default_route: RouteConfig = RouteConfig()
    rules: RulesConfig = RulesConfig()

    def route_named(self, name: str) -> RouteConfig:
        """The route called ``name`` (the default route for ``default`` or a name no longer configured)."""
        for index, route in enumerate(self.routes):
            if route_name(route, index) == name:
                return route
        return self.default_route

    def showback_route(self, team: str) -> tuple[str, RouteConfig]:
        """(name, route) of ``team``'s monthly statements: the first route whose matchers all match the labels
        ``team="<team>"`` and ``rule="showback"`` (:data:`SHOWBACK_RULE`), else the default route. A route's
        ``min_severity`` is not judged: a statement is not an alert. A route matching ``rule="showback"`` with no
        e-mail or Slack target stops statements."""
        labels = {"team": team, "rule": SHOWBACK_RULE}
        for index, route in enumerate(self.routes):
            if all(matcher.matches(labels) for matcher in route.matchers()):
                return route_name(route, index), route
        return "default", self.default_route

    def route_for(self, labels: Mapping[str, str]) -> tuple[str, RouteConfig]:
        """(name, route) of the first route matching ``labels``, else ``("default", default_route)``."""
        for index, route in enumerate(self.routes):
            if route.matches(labels):
                return route_name(route, index), route
        return "default", self.default_route

    def timers_for(self, route: RouteConfig, rule: str) -> Timers:
        """The route's timers with the rule's own ``repeat_interval``, if any (``never``: about a century)."""
        timers = route.timers(self.timers)
        try:
            repeat = self.rules.get(rule).repeat_interval
        except KeyError:
            return timers
        if repeat is None:
            return timers
        interval = timedelta(days=36500) if repeat == "never" else repeat
        return Timers(timers.group_wait, timers.group_interval, interval)


def route_name(route: RouteConfig, index: int) -> str:
    """A route's name: its ``name``, else ``team=<team>``, else ``route-<index>``."""
    if route.name:
        return route.name
    return f"team={route.team}" if route.team is not None else f"route-{index}"


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(top level)"


def parse_model(model: type[M], data: Any, source: str) -> M:
    """Validate parsed YAML ``data`` (None: all defaults) as ``model``. AlertConfigError naming ``source`` and each
    bad field (``alerts.yaml: routes[0].email[1]: …``)."""
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as exc:
        problems = "; ".join(f"{_field_path(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise AlertConfigError(f"{source}: {problems}") from None


def load_model(model: type[M], path: Path) -> M:
    """The YAML file at ``path`` as ``model`` (:func:`parse_model`). AlertConfigError naming the file (and the line
    for YAML syntax, the field for a wrong value)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise AlertConfigError(f"{path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise AlertConfigError(f"{path}:{where} not valid YAML: {getattr(exc, 'problem', exc)}") from None
    return parse_model(model, data, str(path))


def parse_config(data: Any, source: str) -> AlertConfig:
    """Validate parsed YAML ``data`` (None: all defaults). AlertConfigError naming ``source`` and each bad field."""
    return parse_model(AlertConfig, data, source)


def load_config(path: Path | None) -> AlertConfig:
    """The configuration in the YAML file at ``path`` over the defaults (None: the defaults alone).

    AlertConfigError naming the file (and the line for YAML syntax, the field for a wrong value)."""
    return AlertConfig() if path is None else load_model(AlertConfig, path)
