"""Every settings group combined into :class:`Settings`, and :data:`GROUPS` in their documented order."""

from __future__ import annotations

from finops.settings.alerts import AlertSettings, NudgeSettings
from finops.settings.analysis import EfficiencySettings, IdleSettings, WasteSettings
from finops.settings.dashboard import DashboardSettings
from finops.settings.group import SettingsGroup
from finops.settings.server import ApiSettings, IngestSettings, SchedulerSettings, StorageSettings, TlsSettings
from finops.settings.sources import (
    CollectorSettings,
    DemoSettings,
    PricingSettings,
    PrometheusPullSettings,
    SacctSettings,
    TelemetrySettings,
)


class Settings(
    StorageSettings,
    ApiSettings,
    TlsSettings,
    IngestSettings,
    PricingSettings,
    IdleSettings,
    WasteSettings,
    EfficiencySettings,
    SchedulerSettings,
    PrometheusPullSettings,
    TelemetrySettings,
    SacctSettings,
    CollectorSettings,
    DemoSettings,
    AlertSettings,
    NudgeSettings,
    DashboardSettings,
):
    """All service settings, every group's. Each field is ``FINOPS_<NAME>`` in the environment."""


GROUPS: tuple[type[SettingsGroup], ...] = tuple(
    group for group in Settings.__bases__ if issubclass(group, SettingsGroup)
)
"""The settings groups, in the order they are documented (the order of :class:`Settings`' bases)."""
