"""Streamlit entry point: ``streamlit run dashboards/app.py`` (or ``gpu-finops dashboard``)."""

from __future__ import annotations

import streamlit as st

# Every page uses these: imported here, they load (pandas, Altair, the models: a second or two) on the first run of
# a new server whatever page it shows, not on the first visit of each page.
import dashboards.charts
import dashboards.data
import dashboards.filters  # noqa: F401

st.set_page_config(page_title="gpu-finops", layout="wide")
navigation = st.navigation(
    [
        st.Page("views/overview.py", title="Overview", default=True),
        st.Page("views/teams.py", title="Teams"),
        st.Page("views/jobs.py", title="Jobs"),
        st.Page("views/gpus.py", title="GPUs & nodes", url_path="gpus"),
        st.Page("views/idle.py", title="Idle GPUs"),
        st.Page("views/alerts.py", title="Alerts"),
        st.Page("views/quality.py", title="Data quality"),
        st.Page("views/prices.py", title="Prices"),
        st.Page("views/planning.py", title="Planning"),
    ]
)
navigation.run()
