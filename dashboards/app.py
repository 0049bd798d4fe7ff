"""Streamlit entry point: ``streamlit run dashboards/app.py`` (or ``gpu-finops dashboard``).

The log-in is checked first (:func:`dashboards.login.gate`); a person who sees one team is not offered the pages of
the whole fleet (GPUs & nodes, Data quality: nodes and collectors have no team)."""

from __future__ import annotations

import streamlit as st

# Every page uses these: imported here, they load (pandas, Altair, the models: a second or two) on the first run of
# a new server whatever page it shows, not on the first visit of each page.
import dashboards.charts
import dashboards.data
import dashboards.filters
from dashboards import login

st.set_page_config(page_title="gpu-finops", layout="wide")
person = login.gate(dashboards.data.settings())
# Each page, and whether it can be limited to one team (else only those who see everything are offered it).
pages = [
    (st.Page("views/overview.py", title="Overview", default=True), True),
    (st.Page("views/teams.py", title="Teams"), True),
    (st.Page("views/jobs.py", title="Jobs"), True),
    (st.Page("views/gpus.py", title="GPUs & nodes", url_path="gpus"), False),
    (st.Page("views/idle.py", title="Idle GPUs"), True),
    (st.Page("views/savings.py", title="Savings"), True),
    (st.Page("views/alerts.py", title="Alerts"), True),
    (st.Page("views/quality.py", title="Data quality"), False),
    (st.Page("views/prices.py", title="Prices"), True),
    (st.Page("views/planning.py", title="Planning"), True),
]
navigation = st.navigation([page for page, per_team in pages if per_team or person.sees_everything])
navigation.run()
