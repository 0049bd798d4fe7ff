"""Streamlit entry point: ``streamlit run dashboards/app.py`` (or ``gpu-finops dashboard``)."""

from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="gpu-finops", layout="wide")
navigation = st.navigation(
    [
        st.Page("pages/overview.py", title="Overview", default=True),
        st.Page("pages/teams.py", title="Teams"),
        st.Page("pages/idle.py", title="Idle GPUs"),
    ]
)
navigation.run()
