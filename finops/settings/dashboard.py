"""Settings of the dashboard's log-in with an OpenID Connect provider."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from finops.settings.group import SettingsGroup, comma_list


class DashboardSettings(SettingsGroup):
    """Log-in to the dashboard with the site's OpenID Connect provider (Keycloak, Okta, Entra ID, Dex, …) and the
    groups of the ID token that make someone a viewer, an admin or one team's member. Without a provider, the
    dashboard has no log-in and listens on loopback only."""

    dashboard_url: str = Field(
        "",
        description="Base URL people open the dashboard at (`https://finops.example.org`); with OIDC, the provider "
        "sends them back to `<this>/oauth2callback`, the redirect URI to register for the client.",
    )
    dashboard_oidc_metadata_url: str = Field(
        "",
        description="The provider's discovery document, `<issuer>/.well-known/openid-configuration`; empty: no "
        "log-in, and `dashboard` listens on loopback only.",
    )
    dashboard_oidc_client_id: str = Field("", description="Client ID of the dashboard at the provider.")
    dashboard_oidc_client_secret: SecretStr | None = Field(None, description="Client secret of the dashboard.")
    dashboard_oidc_client_secret_file: Path | None = Field(None, description="File holding the client secret.")
    dashboard_oidc_scopes: str = Field(
        "openid email profile",
        description="Scopes asked for, space-separated; add the one that puts the groups claim in the ID token "
        "where the provider needs one (Okta: `groups`).",
    )
    dashboard_oidc_prompt: str = Field(
        "select_account",
        description="OIDC `prompt` of the log-in request (Streamlit's default); `login` or `consent` for providers "
        "that refuse `select_account`.",
    )
    dashboard_oidc_groups_claim: str = Field(
        "groups", description="ID-token claim holding the person's groups (a list of names, or one name)."
    )
    dashboard_admin_groups: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Groups whose members are `admin` (sees every team)."
    )
    dashboard_viewer_groups: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Groups whose members are `viewer` (sees every team)."
    )
    dashboard_team_group_prefix: str = Field(
        "team:",
        description="A group named this prefix and a team (`team:vision`) makes its members `team` role of that "
        "team: they see only its costs. Someone in the groups of two teams and no viewer or admin group is refused.",
    )
    dashboard_cookie_secret: SecretStr | None = Field(
        None,
        description="Key signing the log-in cookie; default: a random one at each start (everyone logs in again "
        "after a restart; set it when several dashboard replicas share a load balancer).",
    )
    dashboard_cookie_secret_file: Path | None = Field(None, description="File holding the cookie secret.")

    _group_lists = field_validator("dashboard_admin_groups", "dashboard_viewer_groups", mode="before")(comma_list)

    @property
    def oidc_enabled(self) -> bool:
        """Whether the dashboard requires a log-in (``FINOPS_DASHBOARD_OIDC_METADATA_URL`` is set)."""
        return bool(self.dashboard_oidc_metadata_url)

    @property
    def redirect_uri(self) -> str:
        """``<FINOPS_DASHBOARD_URL>/oauth2callback``, where the provider sends people back after they log in."""
        return f"{self.dashboard_url.rstrip('/')}/oauth2callback"
