"""The Streamlit dashboard: ``app.py`` routes to thin pages that call :mod:`finops` query functions."""
