"""``gpu-finops collector``: the node agent (read the sources every interval, serve /metrics, spool and ship
the GPU readings to the service); ``gpu-finops slurm-scripts``: where the Slurm prolog and epilog that tell it the
GPUs' jobs are installed.

It runs on GPU nodes that have only the base dependencies (httpx, pydantic, prometheus-client, typer,
nvidia-ml-py), so this module imports :mod:`collector` and nothing of the service (no SQLAlchemy, FastAPI,
PyYAML or Streamlit, and not :mod:`finops.settings`).
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from typing import Annotated

import typer

from collector import node as node_process
from collector.jobmap import SLURM_SCRIPTS
from collector.shipper import tls_context

app = typer.Typer()


@app.command()
def collector(
    service_url: Annotated[str, typer.Option(envvar="FINOPS_SERVICE_URL", help="gpu-finops service base URL.")],
    source: Annotated[
        list[str],
        typer.Option(
            help="Sources to run (repeatable): nvml, amdsmi (AMD Instinct GPUs; the amd extra), nvidia_smi, dcgm, "
            "infiniband, diskstats, nfs, lustre; replay (GPU readings from --replay-file, on a machine without a GPU)."
        ),
    ] = ["nvml", "infiniband", "diskstats", "nfs", "lustre"],  # noqa: B006
    node: Annotated[str, typer.Option(help="This host's name as Slurm knows it (default: hostname).")] = "",
    token_file: Annotated[
        Path | None, typer.Option(envvar="FINOPS_INGEST_TOKEN_FILE", help="Bearer token file.")
    ] = None,
    interval: Annotated[float, typer.Option(help="Seconds between collections.")] = 10.0,
    metrics_address: Annotated[str, typer.Option(help="Address /metrics listens on.")] = "0.0.0.0",
    metrics_port: Annotated[int, typer.Option(help="Port of the collector's /metrics.")] = 9835,
    spool_dir: Annotated[
        Path, typer.Option(envvar="FINOPS_SPOOL_DIR", help="Durable queue of readings not yet acknowledged.")
    ] = Path("/var/lib/gpu-finops/spool"),
    spool_max_mib: Annotated[int, typer.Option(help="Spool size bound, MiB (oldest readings dropped beyond).")] = 256,
    proc_root: Annotated[Path, typer.Option(help="procfs mount point.")] = Path("/proc"),
    sys_root: Annotated[Path, typer.Option(help="sysfs mount point.")] = Path("/sys"),
    dcgm_url: Annotated[str, typer.Option(help="dcgm-exporter /metrics URL.")] = "http://127.0.0.1:9400/metrics",
    nvidia_smi: Annotated[str, typer.Option(help="nvidia-smi command for the nvidia_smi source.")] = "nvidia-smi",
    job_mapping_dir: Annotated[
        Path | None, typer.Option(help="GPU → job directory written by the Slurm prolog (e.g. /run/gpustat).")
    ] = None,
    replay_file: Annotated[
        Path | None,
        typer.Option(
            help="nvidia-smi capture the replay source plays, one step a cycle, over and over, stamped now: "
            "`nvidia-smi --query-gpu=index,uuid,name,… --format=csv` output (docs/collector.md)."
        ),
    ] = None,
    ca_file: Annotated[
        Path | None,
        typer.Option(
            envvar="FINOPS_SERVICE_CA_FILE",
            help="PEM CA bundle the https:// service's certificate is verified against (default: the system's "
            "trust store).",
        ),
    ] = None,
) -> None:
    """Run the node collector: read sources every interval, serve /metrics, spool and ship GPU readings.

    An https:// --service-url is verified against --ca-file, else the system's trust store; a certificate that does
    not verify is logged and its readings stay spooled, retried like any network failure."""
    _check_ca_file(ca_file, service_url)
    config = node_process.NodeConfig(
        service_url=service_url,
        token=_token(token_file),
        token_file=token_file,
        node=node or socket.gethostname(),
        spool_dir=spool_dir,
        spool_max_bytes=spool_max_mib * 2**20,
        interval_seconds=interval,
        metrics_address=metrics_address,
        metrics_port=metrics_port,
        proc_root=proc_root,
        sys_root=sys_root,
        dcgm_url=dcgm_url,
        nvidia_smi=nvidia_smi,
        job_mapping_dir=job_mapping_dir,
        ca_file=ca_file,
        replay_file=replay_file,
    )
    try:
        sources = [node_process.build_source(name, config) for name in source]
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--source") from exc
    node_process.run(config, sources, threading.Event())


@app.command("slurm-scripts")
def slurm_scripts() -> None:
    """Print the slurm.conf lines that install the shipped Prolog and Epilog, as installed here.

    The Prolog writes which job holds each GPU into /run/gpustat (GPU_JOB_MAPPING_DIR), the Epilog turns the job's
    files into end records; the collector reads them (--job-mapping-dir). slurm.conf is the same on every node, so
    install gpu-finops at the same path on every GPU node. PrologFlags=Alloc (or Contain, which implies it) runs
    the Prolog on every node of a job when it is allocated: without it, it runs only where a step starts, and the
    other nodes of a multi-node job get no GPU → job mapping. Add Alloc to the PrologFlags you have."""
    for parameter, path in SLURM_SCRIPTS.items():
        typer.echo(f"{parameter}={path}")
    typer.echo("PrologFlags=Alloc")


def _token(token_file: Path | None) -> str:
    """The ingest token: the text of ``token_file`` stripped, else ``FINOPS_INGEST_TOKEN`` (may be empty).
    BadParameter naming --token-file when the file cannot be read."""
    if token_file is None:
        return os.environ.get("FINOPS_INGEST_TOKEN", "")
    try:
        return token_file.read_text().strip()
    except OSError as exc:
        raise typer.BadParameter(f"{token_file}: {exc.strerror or exc}", param_hint="--token-file") from exc
    except UnicodeDecodeError as exc:
        raise typer.BadParameter(f"{token_file}: not text", param_hint="--token-file") from exc


def _check_ca_file(ca_file: Path | None, service_url: str) -> None:
    """BadParameter naming --ca-file when it is given for a service that is not https://, or is not a readable PEM
    CA bundle."""
    if ca_file is None:
        return
    if not service_url.lower().startswith("https://"):
        raise typer.BadParameter(
            f"verifies an https:// service, and --service-url is {service_url}", param_hint="--ca-file"
        )
    try:
        tls_context(ca_file)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--ca-file") from exc
