"""Kubernetes pods as jobs: parsing Pod lists, the effective GPU count, MIG shares, teams, re-imports, the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import func, select

from collector.contract.wire import GpuInfo
from finops.db.ledger_tables import DirtyHour, LedgerEntry
from finops.db.models import UNALLOCATED_TEAM, UNMAPPED_TEAM, Allocation, Gpu, Job, Node, Team
from finops.ingest.readings import Ingestor
from finops.jobs.kubernetes import (
    KubernetesFormatError,
    _device_counts,
    load_document,
    parse_nodes,
    parse_pods,
    product_model,
)
from finops.jobs.kubernetes_import import import_pods
from finops.jobs.teams import set_rule
from finops.ledger.costmodel import capacity_cost
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import to_epoch

FIXTURES = Path(__file__).parents[1] / "fixtures" / "kubernetes"
LISTED_AT = datetime(2026, 1, 5, 11, 0, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"


def _pods() -> dict[str, Any]:
    document: dict[str, Any] = orjson.loads((FIXTURES / "pods.json").read_bytes())
    return document


def _nodes() -> dict[str, dict[str, str]]:
    nodes, errors = parse_nodes(orjson.loads((FIXTURES / "nodes.json").read_bytes()), source="nodes.json")
    assert errors == []
    return nodes


def _item(document: dict[str, Any], name: str) -> dict[str, Any]:
    item: dict[str, Any] = next(i for i in document["items"] if i["metadata"]["name"] == name)
    return item


def _import(session, document: dict[str, Any], **options: Any):  # type: ignore[no-untyped-def]
    options.setdefault("listed_at", LISTED_AT)
    options.setdefault("cluster", "k1")
    return import_pods(session, document, source="pods.json", nodes=options.pop("nodes", _nodes()), **options)


def _jobs(session) -> dict[str, Job]:  # type: ignore[no-untyped-def]
    return {job.job_id: job for job in session.scalars(select(Job))}


# --- parsing -----------------------------------------------------------------------------------------------


def test_fixture_pods_are_read_with_their_gpus_times_and_labels() -> None:
    listing = parse_pods(_pods(), source="pods.json")
    pods = {pod.job_id: pod for pod in listing.pods}
    assert list(pods) == [
        "ml-train/llama-ft-0",
        "ml-train/eval-7f9c",
        "inference/vllm-small-5d8b7c9f4-x2x4z",
        "inference/vllm-medium-6a2c1e8d7-p9k2m",
        "ml-train/preproc-2",
        "research/waiting-for-gpus",
    ]
    assert listing.without_gpus == 1  # coredns
    llama = pods["ml-train/llama-ft-0"]
    assert (llama.gpus, llama.mig, llama.node, llama.phase) == (4, {}, "gpu-node-a1", "Running")
    assert (llama.start, llama.end) == (datetime(2026, 1, 5, 10, 0, tzinfo=UTC), None)
    assert llama.uid == "3f9a6c2e-1d4b-4e8f-9b7a-5c2d1e0f3a41"
    assert llama.labels["user"] == "alice" and llama.labels["project"] == "llama"
    assert llama.node_selector == {"cloud.google.com/gke-nodepool": "h100-pool"}
    # Succeeded: ends at the last container's finishedAt (the log shipper's, after the GPU container's).
    done = pods["ml-train/eval-7f9c"]
    assert (done.gpus, done.phase) == (1, "Succeeded")
    assert (done.start, done.end) == (datetime(2026, 1, 5, 8, 0, tzinfo=UTC), datetime(2026, 1, 5, 9, 30, tzinfo=UTC))
    assert pods["inference/vllm-small-5d8b7c9f4-x2x4z"].mig == {"1g.10gb": 1}
    assert pods["inference/vllm-small-5d8b7c9f4-x2x4z"].gpus == 0
    medium = pods["inference/vllm-medium-6a2c1e8d7-p9k2m"]
    assert medium.mig == {"3g.40gb": 1} and medium.start == datetime(2026, 1, 5, 9, 10, tzinfo=UTC)
    assert pods["ml-train/preproc-2"].gpus == 2  # the init container's 2 GPUs outweigh the app's 1
    assert pods["research/waiting-for-gpus"].start is None  # never bound to a node


def test_a_malformed_pod_is_named_with_its_field_and_the_rest_read() -> None:
    listing = parse_pods(_pods(), source="pods.json")
    [error] = listing.errors
    assert error.pod == "research/broken-job"
    assert error.field == "spec.containers[0].resources.limits.nvidia.com/gpu"
    assert error.message == (
        "pods.json: pod research/broken-job: field spec.containers[0].resources.limits.nvidia.com/gpu: "
        "'1.5' is not a whole number of devices"
    )


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (lambda p: p["metadata"].pop("uid"), "metadata.uid", "expected a non-empty string"),
        (lambda p: p["status"].update(startTime="yesterday"), "status.startTime", "'yesterday' is not an RFC 3339"),
        (lambda p: p["status"].update(startTime="2026-01-05T10:00:00"), "status.startTime", "has no UTC offset"),
        (
            lambda p: p["spec"]["containers"][0]["resources"]["requests"].update({"nvidia.com/gpu": "2"}),
            "spec.containers[0].resources.requests.nvidia.com/gpu",
            "request 2 differs from limit 4",
        ),
        (lambda p: p["spec"].update(containers={}), "spec.containers", "expected a list, found an object"),
        (
            lambda p: p["metadata"].update(name="x" * 320),
            "metadata.name",
            "namespace/name is longer than the 317 characters",
        ),
    ],
)
def test_bad_fields_are_named(change: Any, field: str, message: str) -> None:
    document = _pods()
    change(_item(document, "llama-ft-0"))
    errors = [e for e in parse_pods(document, source="p").errors if e.pod != "research/broken-job"]
    assert [e.field for e in errors] == [field]
    assert message in errors[0].message


def test_a_failed_pod_that_never_ran_a_container_holds_nothing() -> None:
    document = _pods()
    pod = _item(document, "llama-ft-0")
    pod["status"] = {"phase": "Failed", "reason": "UnexpectedAdmissionError", "startTime": "2026-01-05T10:00:00Z"}
    assert next(p for p in parse_pods(document, source="p").pods if p.name == "llama-ft-0").start is None


@pytest.mark.parametrize(
    ("init", "app", "gpus"),
    [
        ([], [1, 2], 3),  # app containers add up
        ([4], [1, 2], 4),  # an init container needing more than the app containers
        ([1, 3, 2], [2], 3),  # init containers run one at a time: the largest counts
        ([("sidecar", 1)], [2], 3),  # a sidecar runs beside the app containers
        ([("sidecar", 1), 3], [1], 4),  # ... and beside the init containers after it
        ([3, ("sidecar", 1)], [1], 3),  # but not beside those before it
    ],
)
def test_effective_gpu_count_follows_the_init_container_rule(init: list[Any], app: list[int], gpus: int) -> None:
    def container(count: int, sidecar: bool = False) -> dict[str, Any]:
        spec: dict[str, Any] = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(count)}}}
        if sidecar:
            spec["restartPolicy"] = "Always"
        return spec

    spec = {
        "containers": [container(n) for n in app],
        "initContainers": [container(c[1], True) if isinstance(c, tuple) else container(c) for c in init],
    }
    assert _device_counts(spec) == {"nvidia.com/gpu": gpus}


def test_documents_that_are_not_pod_lists_are_refused() -> None:
    with pytest.raises(KubernetesFormatError, match=r"^p.json:1:2: not JSON"):
        load_document(b"{x", source="p.json")
    with pytest.raises(KubernetesFormatError, match="expected a PodList or List with items, found kind 'Service'"):
        parse_pods({"kind": "Service"}, source="p.json")


def test_node_labels_of_gpu_nodes_only_and_the_product_model() -> None:
    nodes = _nodes()
    assert set(nodes) == {"gpu-node-a1", "gpu-node-m1"}
    assert product_model(nodes["gpu-node-a1"]) == H100
    assert product_model({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"}) == "NVIDIA A100 SXM4 40GB"


# --- importing ---------------------------------------------------------------------------------------------


def test_import_stores_gpu_pods_as_jobs_with_teams_by_namespace_then_label(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        set_rule(session, "namespace", "", "ml-train", "ml-platform", actor="system:test")
        set_rule(session, "label", "team", "nlp", "nlp", actor="system:test")
        result = _import(session, _pods())
        assert (result.jobs, result.without_gpus, result.not_started, result.nodes_labelled) == (5, 1, 1, 2)
        assert [e.pod for e in result.errors] == ["research/broken-job"]
        jobs = _jobs(session)
        teams = {team.id: team.name for team in session.scalars(select(Team))}
        node_labels = {n.hostname: n.labels for n in session.scalars(select(Node))}
    llama = jobs["ml-train/llama-ft-0"]
    assert (llama.scheduler, llama.cluster, llama.job_id_raw) == (
        "kubernetes",
        "k1",
        "3f9a6c2e-1d4b-4e8f-9b7a-5c2d1e0f3a41",
    )
    assert (llama.account, llama.namespace, llama.user, llama.project) == (
        "ml-train",
        "ml-train",
        "claimed:alice",
        "llama",
    )
    assert (llama.partition, llama.node_list, llama.gpus, llama.state) == ("h100-pool", "gpu-node-a1", 4, "Running")
    assert llama.labels is not None and llama.labels["user"] == "alice"
    assert teams[llama.team_id] == "ml-platform"  # by namespace
    assert teams[jobs["ml-train/eval-7f9c"].team_id] == "ml-platform"  # its own team label does not override
    assert teams[jobs["ml-train/llama-ft-0"].team_id] == "ml-platform"
    assert teams[jobs["inference/vllm-small-5d8b7c9f4-x2x4z"].team_id] == UNMAPPED_TEAM
    assert jobs["inference/vllm-small-5d8b7c9f4-x2x4z"].partition == "mig-inference"
    assert jobs["inference/vllm-small-5d8b7c9f4-x2x4z"].gpu_type == "1g.10gb"
    assert jobs["ml-train/eval-7f9c"].end == datetime(2026, 1, 5, 9, 30, tzinfo=UTC)
    assert node_labels["gpu-node-a1"] is not None and node_labels["gpu-node-a1"]["nvidia.com/gpu.count"] == "8"


def test_mig_pods_share_one_gpu_by_their_profiles(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        _import(session, _pods())
        rows = session.execute(
            select(
                Job.name, Gpu.gpu_index, Gpu.model, Allocation.share_num, Allocation.share_den, Allocation.mig_profile
            )
            .join(Allocation, Allocation.job_pk == Job.id)
            .join(Gpu, Gpu.id == Allocation.gpu_id)
            .where(Job.namespace == "inference")
        ).all()
    placed = {
        name.split("-")[1]: (index, model, Fraction(num, den), profile)
        for name, index, model, num, den, profile in rows
    }
    assert placed == {
        "small": (0, H100, Fraction(1, 7), "1g.10gb"),
        "medium": (0, H100, Fraction(3, 7), "3g.40gb"),
    }


def test_whole_gpu_pods_do_not_overlap(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        _import(session, _pods())
        placed = session.execute(
            select(Job.name, Gpu.gpu_index)
            .join(Allocation, Allocation.job_pk == Job.id)
            .join(Gpu, Gpu.id == Allocation.gpu_id)
            .where(Job.node_list == "gpu-node-a1")
        ).all()
    by_pod: dict[str, list[int]] = {}
    for name, index in placed:
        by_pod.setdefault(name, []).append(index)
    # eval ran 08:00-09:30 on GPU 0; llama from 10:00 on 0-3; preproc-2 from 10:05 on the next two.
    assert {name: sorted(indices) for name, indices in by_pod.items()} == {
        "eval-7f9c": [0],
        "llama-ft-0": [0, 1, 2, 3],
        "preproc-2": [4, 5],
    }


def test_reimport_changes_nothing(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        _import(session, _pods())
        session.execute(DirtyHour.__table__.delete())
        before = session.execute(select(Allocation.job_pk, Allocation.gpu_id, Allocation.start, Allocation.end)).all()
        result = _import(session, _pods(), complete=True)
        after = session.execute(select(Allocation.job_pk, Allocation.gpu_id, Allocation.start, Allocation.end)).all()
        assert result.jobs == 5 and result.ended_missing == 0
        assert sorted(after) == sorted(before)
        assert session.scalar(select(func.count()).select_from(Job)) == 5
        assert session.scalar(select(func.count()).select_from(DirtyHour)) == 0


def test_a_running_pod_that_ends_is_cut_and_its_hours_marked(sessions) -> None:  # type: ignore[no-untyped-def]
    later = _pods()
    llama = _item(later, "llama-ft-0")
    llama["status"]["phase"] = "Succeeded"
    llama["status"]["containerStatuses"][0]["state"] = {
        "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": "2026-01-05T10:01:30Z",
                       "finishedAt": "2026-01-05T12:00:05Z"}
    }  # fmt: skip
    with sessions.begin() as session:
        _import(session, _pods())
        pk = _jobs(session)["ml-train/llama-ft-0"].id
        gpus = sorted(session.scalars(select(Allocation.gpu_id).where(Allocation.job_pk == pk)))
        session.execute(DirtyHour.__table__.delete())
        _import(session, later, listed_at=LISTED_AT + timedelta(hours=2))
        job = _jobs(session)["ml-train/llama-ft-0"]
        ends = set(session.scalars(select(Allocation.end).where(Allocation.job_pk == job.id)))
        dirty = sorted(to_epoch(h) for h in session.scalars(select(DirtyHour.hour)))
        assert job.id == pk and job.state == "Succeeded"
        assert sorted(session.scalars(select(Allocation.gpu_id).where(Allocation.job_pk == pk))) == gpus
    end = datetime(2026, 1, 5, 12, 0, 5, tzinfo=UTC)
    assert job.end == end and ends == {end}
    assert dirty[0] == to_epoch(datetime(2026, 1, 5, 12, 0, tzinfo=UTC))


def test_pods_missing_from_a_listing_end_only_when_it_is_complete(sessions) -> None:  # type: ignore[no-untyped-def]
    later = _pods()
    later["items"] = [i for i in later["items"] if not i["metadata"]["name"].startswith("vllm-small")]
    with sessions.begin() as session:
        _import(session, _pods())
        partial = _import(session, later, listed_at=LISTED_AT + timedelta(hours=1))
        assert partial.ended_missing == 0
        assert _jobs(session)["inference/vllm-small-5d8b7c9f4-x2x4z"].end is None
        full = _import(session, later, listed_at=LISTED_AT + timedelta(hours=1), complete=True)
        gone = _jobs(session)["inference/vllm-small-5d8b7c9f4-x2x4z"]
        assert full.ended_missing == 1
        assert (gone.end, gone.state) == (LISTED_AT + timedelta(hours=1), "Deleted")
        assert set(session.scalars(select(Allocation.end).where(Allocation.job_pk == gone.id))) == {gone.end}
        # The broken pod is in the listing (unreadable), the finished one is already ended: neither changes.
        assert _jobs(session)["ml-train/llama-ft-0"].end is None


def test_a_label_change_moves_the_pod_to_its_new_team(sessions) -> None:  # type: ignore[no-untyped-def]
    later = _pods()
    _item(later, "llama-ft-0")["metadata"]["labels"]["team"] = "nlp"
    with sessions.begin() as session:
        set_rule(session, "label", "team", "nlp", "nlp", actor="system:test")
        _import(session, _pods())
        _import(session, later)
        job = _jobs(session)["ml-train/llama-ft-0"]
        assert session.get(Team, job.team_id).name == "nlp"  # type: ignore[union-attr]
        assert job.labels is not None and job.labels["team"] == "nlp"


def test_a_mig_pod_for_an_hour_is_billed_a_seventh_of_the_gpu_hour(sessions) -> None:  # type: ignore[no-untyped-def]
    document = _pods()
    document["items"] = [_item(document, "vllm-small-5d8b7c9f4-x2x4z")]
    pod = document["items"][0]
    pod["status"]["phase"] = "Succeeded"
    pod["status"]["containerStatuses"][0]["state"] = {
        "terminated": {"exitCode": 0, "startedAt": "2026-01-05T09:00:00Z", "finishedAt": "2026-01-05T10:00:00Z"}
    }
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    hour = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    with sessions.begin() as session:
        _import(session, document)
        [(num, den)] = session.execute(select(Allocation.share_num, Allocation.share_den)).all()
        assert Fraction(num, den) == Fraction(1, 7)
        rollup(session, pricing, to_epoch(hour) + 3600)
        rows = session.execute(
            select(LedgerEntry.job_pk, Team.name, LedgerEntry.allocated_cost)
            .join(Team, Team.id == LedgerEntry.team_id)
            .where(LedgerEntry.hour == hour)
        ).all()
    capacity = capacity_cost(pricing.catalog.rate(H100, PricingModel.ON_DEMAND, hour), 3600)
    pod_cost = sum((cost for job, _, cost in rows if job is not None), Decimal(0))
    assert sum(cost for _, _, cost in rows) == capacity
    assert abs(pod_cost - capacity / 7) <= Decimal("0.000001")
    assert {team for job, team, _ in rows if job is None} == {UNALLOCATED_TEAM}


# --- the command -------------------------------------------------------------------------------------------


def _cli(database_url: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FINOPS_DATABASE_URL": database_url}
    command = [sys.executable, "-m", "finops.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, input=stdin)


def test_import_pods_command(engine, sessions, database_url: str) -> None:  # type: ignore[no-untyped-def]
    pods, nodes = str(FIXTURES / "pods.json"), str(FIXTURES / "nodes.json")
    run = _cli(database_url, "import", "pods", pods, "--nodes", nodes, "--cluster", "k1", "--complete")
    assert run.returncode == 1, run.stderr
    assert (
        "imported 5 GPU pods; 1 without GPUs; 1 not started; 0 ended as gone; 2 node labels; 1 bad pods" in run.stdout
    )
    assert f"skipped {pods}: pod research/broken-job: field spec.containers[0].resources.limits.nvidia.com/gpu" in (
        run.stderr
    )
    again = _cli(database_url, "import", "pods", "-", "--cluster", "k1", stdin="{not json")
    assert again.returncode == 2 and "error: <stdin>:" in again.stderr and "not JSON" in again.stderr
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Job).where(Job.scheduler == "kubernetes")) == 5
    missing = _cli(database_url, "import", "pods", str(FIXTURES / "absent.json"))
    assert missing.returncode == 2 and "absent.json: No such file or directory" in missing.stderr


def test_a_mig_profile_is_priced_by_the_nodes_gpu_or_refused(sessions) -> None:  # type: ignore[no-untyped-def]
    document = _pods()
    small = _item(document, "vllm-small-5d8b7c9f4-x2x4z")
    for key in ("limits", "requests"):
        resources = small["spec"]["containers"][0]["resources"][key]
        resources["nvidia.com/mig-1g.24gb"] = resources.pop("nvidia.com/mig-1g.10gb")
    rtx = {"gpu-node-m1": {"nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"}}
    with sessions.begin() as session:
        # 1g.24gb is a seventh of an H100 94GB or a quarter of an RTX PRO 6000: the node's label decides.
        unknown = _import(session, document, nodes={})
        error = next(e for e in unknown.errors if e.pod.startswith("inference/vllm-small"))
        assert error.field == "spec.containers[].resources.limits.nvidia.com/mig-1g.24gb"
        assert "the GPU's number of compute slices is unknown" in error.message
        assert unknown.jobs == 4
        known = _import(session, document, nodes=rtx)
        assert [e.pod for e in known.errors] == ["research/broken-job"]
        job = _jobs(session)["inference/vllm-small-5d8b7c9f4-x2x4z"]
        [(num, den)] = session.execute(
            select(Allocation.share_num, Allocation.share_den).where(Allocation.job_pk == job.id)
        ).all()
    assert Fraction(num, den) == Fraction(1, 4)


# --- AMD GPUs ----------------------------------------------------------------------------------------------

MI300X_CPX = "AMD Instinct MI300X OAM (CPX partition 1/8)"


def _amd_documents() -> tuple[dict[str, Any], dict[str, Any]]:
    """A node with one MI300X in CPX mode (AMD's device plugin: 8 ``amd.com/gpu``; AMD's node labeller's product
    label) and a pod holding two of its partitions for the hour 09:00-10:00; written by hand."""
    node = {
        "metadata": {"name": "mi300x-01", "labels": {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}},
        "status": {"capacity": {"amd.com/gpu": "8", "cpu": "192"}},
    }
    pod = {
        "metadata": {"namespace": "ml-team", "name": "trainer-0", "uid": "0e3c8a52-7f1d-4c1e-9a3b-2d6f5e4c3b2a"},
        "spec": {
            "nodeName": "mi300x-01",
            "containers": [{"name": "pytorch", "resources": {"limits": {"amd.com/gpu": "2"}}}],
        },
        "status": {
            "phase": "Succeeded",
            "startTime": "2026-01-05T09:00:00Z",
            "containerStatuses": [
                {"state": {"terminated": {"startedAt": "2026-01-05T09:00:00Z", "finishedAt": "2026-01-05T10:00:00Z"}}}
            ],
        },
    }
    return {"kind": "List", "items": [node]}, {"kind": "List", "items": [pod]}


def test_amd_gpu_pods_are_imported_placed_and_billed_per_partition(sessions) -> None:  # type: ignore[no-untyped-def]
    """An ``amd.com/gpu`` pod on an MI300X CPX node is a job holding two partitions; the partitions are the GPUs the
    Prometheus pull registers (model named as 1/8 of the MI300X), so the pod's hour costs 2/8 of an MI300X-hour."""
    node_list, pods = _amd_documents()
    nodes, errors = parse_nodes(node_list, source="nodes.json")
    assert errors == [] and product_model(nodes["mi300x-01"]) == "AMD Instinct MI300X OAM"
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    hour = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    with sessions.begin() as session:
        Ingestor().register(
            session,
            "mi300x-01",
            [GpuInfo(uuid=f"5cff74b5-0000-1000-80{i}0-7e3e3a6ed2a1", index=i, model=MI300X_CPX) for i in range(8)],
            dict.fromkeys((f"5cff74b5-0000-1000-80{i}0-7e3e3a6ed2a1" for i in range(8)), to_epoch(hour)),
        )
        result = import_pods(session, pods, source="pods.json", nodes=nodes, listed_at=LISTED_AT, cluster="k1")
        assert (result.jobs, result.errors) == (1, [])
        job = _jobs(session)["ml-team/trainer-0"]
        assert (job.gpus, job.gpu_type, job.node_list) == (2, MI300X_CPX, "mi300x-01")
        placed = session.execute(
            select(Gpu.gpu_index, Gpu.model, Allocation.share_num, Allocation.share_den)
            .join(Allocation, Allocation.gpu_id == Gpu.id)
            .where(Allocation.job_pk == job.id)
        ).all()
        assert sorted(placed) == [(0, MI300X_CPX, 1, 1), (1, MI300X_CPX, 1, 1)]
        rollup(session, pricing, to_epoch(hour) + 3600)
        pod_cost = session.scalar(
            select(func.sum(LedgerEntry.allocated_cost)).where(LedgerEntry.job_pk == job.id, LedgerEntry.hour == hour)
        )
    mi300x_hour = pricing.catalog.rate("AMD Instinct MI300X OAM", PricingModel.ON_DEMAND, hour)
    assert pod_cost == mi300x_hour * 2 / 8 == Decimal("1.50")
