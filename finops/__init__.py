"""gpu-finops service: ingest, job import, cost attribution, idle detection, budgets and reports."""
