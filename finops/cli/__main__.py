"""``python -m finops.cli``: the same as the ``gpu-finops`` command."""

from finops.cli import app

app()
