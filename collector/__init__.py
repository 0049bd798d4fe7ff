"""gpu-finops node collector.

Runs on every GPU host. Reads telemetry sources on a timer, converts every value to base units at the
edge, exposes the latest readings on ``/metrics`` and ships GPU readings to the gpu-finops service.
It depends only on the collector's small dependency set (no SQLAlchemy, FastAPI or Streamlit).
"""
