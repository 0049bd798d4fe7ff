"""The dashboard's log-in (Streamlit's ``st.login`` with the site's OpenID Connect provider) and the access it
gives (:mod:`dashboards.access`), checked by ``app.py`` before any page runs.

With ``FINOPS_DASHBOARD_OIDC_METADATA_URL`` set, someone not logged in sees only a "Log in" button; logged in, the
sidebar says who they are, their role (and team) and offers "Log out"; someone whose groups give no role sees why
and can log out. Without it, everyone is a viewer and every page's sidebar says so.
"""

from __future__ import annotations

import streamlit as st

from dashboards.access import EVERYONE, Access, GroupMapping, Refusal, access_of, is_loopback
from finops.settings.dashboard import DashboardSettings

_ACCESS = "finops_access"


def mapping(settings: DashboardSettings) -> GroupMapping:
    """The groups → roles mapping of the settings (``FINOPS_DASHBOARD_*_GROUPS``, the claim and the team prefix)."""
    return GroupMapping(
        claim=settings.dashboard_oidc_groups_claim,
        admin_groups=frozenset(settings.dashboard_admin_groups),
        viewer_groups=frozenset(settings.dashboard_viewer_groups),
        team_prefix=settings.dashboard_team_group_prefix,
    )


def unauthenticated_notice(address: str) -> str:
    """What the sidebar says when the dashboard has no log-in and listens on ``address``."""
    if is_loopback(address):
        where = f"listening on {address} only"
    else:
        where = f"listening on {address} without a log-in: everyone who reaches it sees every team"
    return (
        f"Unauthenticated: {where}; configure FINOPS_DASHBOARD_OIDC_METADATA_URL (and the other "
        "FINOPS_DASHBOARD_OIDC_* settings) to require login."
    )


def gate(settings: DashboardSettings) -> Access:
    """The access of the person viewing this run, kept for :func:`current`; stops the run (``st.stop``) after the
    "Log in" button when the log-in is required and they have not, or after the reason and "Log out" when their
    groups give no access."""
    st.session_state.pop(_ACCESS, None)
    if not settings.oidc_enabled:
        st.sidebar.warning(unauthenticated_notice(str(st.get_option("server.address") or "127.0.0.1")))
        st.session_state[_ACCESS] = EVERYONE
        return EVERYONE
    if not st.user.get("is_logged_in"):
        st.title("gpu-finops")
        st.write("GPU costs per team and job. Log in with your organisation's account to see them.")
        st.button("Log in", type="primary", on_click=st.login)
        st.stop()
    claims = st.user.to_dict()
    name = next((str(claims[k]) for k in ("name", "preferred_username", "email", "sub") if claims.get(k)), "?")
    found = access_of(claims, mapping(settings))
    if isinstance(found, Refusal):
        st.title("Not authorised")
        st.error(f"You are logged in as {name}, but {found.reason}.")
        st.button("Log out", on_click=st.logout)
        st.stop()
    st.sidebar.caption(f"Logged in as **{name}** · role: {found.describe()}")
    st.sidebar.button("Log out", on_click=st.logout)
    st.session_state[_ACCESS] = found
    return found


def current() -> Access:
    """The access :func:`gate` found for this run. RuntimeError when no gate ran (a page run on its own), so that
    no page shows data to someone unchecked."""
    found = st.session_state.get(_ACCESS)
    if not isinstance(found, Access):
        raise RuntimeError("the dashboard's pages run from dashboards/app.py, which checks the log-in")
    return found
