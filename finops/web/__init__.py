"""The HTTP service (FastAPI): collector ingest, the REST API and the alerts API, with their bearer checks and
database session dependency defined once, plus ``/healthz`` and the service ``/metrics``."""
