"""``gpu-finops``: the one command line for the collector, the service, imports, reports and the demo.

This package only builds :data:`app` (the ``gpu-finops`` entry point; ``python -m finops.cli`` is the same)
from one module per command group:

- :mod:`finops.cli.base`: the root group (user errors → exit code 2), ``--verbose``, service stand-ins;
- :mod:`finops.cli.collector`: ``collector``, the node agent;
- :mod:`finops.cli.context`: what the service commands share (settings, database, pricing, options);
- :mod:`finops.cli.serve`: ``serve``, ``scheduler``, ``dashboard``;
- :mod:`finops.cli.db`, :mod:`~finops.cli.imports`, :mod:`~finops.cli.teams`, :mod:`~finops.cli.prices`,
  :mod:`~finops.cli.nodes`, :mod:`~finops.cli.budget`, :mod:`~finops.cli.alerts`, :mod:`~finops.cli.export`: ``db``,
  ``import``, ``team``, ``prices``, ``nodes``, ``budget``, ``alerts``, ``export``;
- :mod:`finops.cli.idle`: ``idle``, the idle GPU episodes;
- :mod:`finops.cli.nudges`: ``nudges``, the per-user messages about wasteful jobs;
- :mod:`finops.cli.rightsizing`: ``rightsizing``, GPU requests that use would have let be smaller;
- :mod:`finops.cli.mfu`: ``mfu``, inference jobs' model FLOPs utilisation and cost per PFLOP and per 1M tokens;
- :mod:`finops.cli.api_tokens`: ``api-token``, the REST API's credentials;
- :mod:`finops.cli.audit`: ``audit``, the log of changes;
- :mod:`finops.cli.report`: ``report``, ``rollup``; :mod:`finops.cli.commitments`: ``commitments``;
  :mod:`finops.cli.showback`: ``showback``, the monthly statements; :mod:`finops.cli.demo`: ``demo``.

The collector runs on GPU nodes that have only the base dependencies, so it is the one command registered here;
the service commands are imported when they are run or listed (:data:`finops.cli.base.SERVICE_COMMANDS`): a
command loads only its own module, and without the service extra (SQLAlchemy, FastAPI, Alembic, …) each service
command is still listed, and running it prints one line saying to install ``gpu-finops[service]`` and exits
with code 2. Every command that reads or writes the database refuses to
run before ``gpu-finops db upgrade``.

Exit codes:

- 0: done;
- 1: the command ran but part of its input was refused (sacct lines, pods, delivery ids not failed), or an
  external command or server failed (sacct, Prometheus, a test delivery); what could be done is done;
- 2: user error: bad input or option, a file that cannot be read or is refused (price catalog, alert rules,
  pods listing), a name that does not exist (team rule, silence, alert route), the database not migrated,
  bad ``FINOPS_*`` settings. Commands raise :class:`~finops.errors.FinopsError` (or ``typer.BadParameter``)
  for these; :class:`finops.cli.base.FinopsGroup` prints ``error: <message>`` on stderr in one place.
"""

from __future__ import annotations

import typer

from finops.cli import base, collector

app = typer.Typer(
    cls=base.FinopsGroup, help="GPU cluster telemetry turned into cost per team and job.", no_args_is_help=True
)
app.callback()(base.configure_logging)
app.add_typer(collector.app)

__all__ = ["app"]
