"""deploy/kubernetes without a cluster: rendered as kustomize does (checked against `kubectl kustomize` where kubectl
is installed), every object valid against the Kubernetes OpenAPI schema in strict mode, and what the manifests
promise: the collector reads the host's /proc and /sys read-only as its node, with its node's token from a Secret;
the pods import may only get and list pods and nodes; every command, option, FINOPS_* variable, port and probe is
one the gpu-finops CLI has; the central pods meet the "restricted" Pod Security level; every Secret they read is
one docs/deployment.md says how to create."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml

from finops.settings.combined import Settings
from tests.support.command_lines import CommandLineError, environment_variables, parse, parsed_options
from tests.support.environment import REPO_ROOT

KUSTOMIZATION_DIR = REPO_ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.37"
"""The newest Kubernetes whose schema kubernetes-validate ships (the dev extra pins it)."""
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
WORKLOADS = {"Deployment", "DaemonSet", "CronJob"}
VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]


def render() -> list[dict[str, Any]]:
    """The objects ``kubectl apply -k deploy/kubernetes`` creates. The kustomization uses only ``namespace``,
    ``resources`` and a ConfigMap generator without name suffix, which is all this does."""
    kustomization = yaml.safe_load((KUSTOMIZATION_DIR / "kustomization.yaml").read_text())
    used = set(kustomization) - {"apiVersion", "kind"}
    assert used <= {"namespace", "resources", "configMapGenerator", "generatorOptions"}, used
    assert kustomization.get("generatorOptions") == {"disableNameSuffixHash": True}
    namespace = kustomization["namespace"]
    objects = [
        document
        for resource in kustomization["resources"]
        for document in yaml.safe_load_all((KUSTOMIZATION_DIR / resource).read_text())
        if document is not None
    ]
    for generator in kustomization.get("configMapGenerator", []):
        data = {PurePosixPath(name).name: (KUSTOMIZATION_DIR / name).read_text() for name in generator["files"]}
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": generator["name"]}, "data": data})
    for item in objects:
        if item["kind"] not in CLUSTER_SCOPED:
            item["metadata"]["namespace"] = namespace
        for subject in item.get("subjects", []):
            if subject["kind"] == "ServiceAccount":
                subject["namespace"] = namespace
    return objects


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return render()


def named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    template = workload["spec"]["jobTemplate"]["spec"] if workload["kind"] == "CronJob" else workload["spec"]
    return dict(template["template"]["spec"])


def workloads(objects: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, its pod spec) of every object that runs pods."""
    for item in objects:
        if item["kind"] in WORKLOADS:
            yield item, pod_spec(item)


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def gpu_finops_containers(objects: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, container) of every container that runs a ``gpu-finops`` command."""
    for _, spec in workloads(objects):
        for container in containers(spec):
            if container["command"][0] == "gpu-finops":
                yield spec, container


def env_value(container: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [variable for variable in container.get("env", []) if variable["name"] == name]
    return found


def expand(argument: str, container: dict[str, Any]) -> str:
    """``$(NAME)`` of the container's literal env values replaced, as the kubelet does (others stay)."""
    values = {v["name"]: v["value"] for v in container.get("env", []) if "value" in v}
    return re.sub(r"\$\((\w+)\)", lambda m: values.get(m.group(1), m.group(0)), argument)


def mount_of(spec: dict[str, Any], container: dict[str, Any], path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume mount, volume) of the container holding ``path``."""
    holding = [m for m in container.get("volumeMounts", []) if PurePosixPath(path).is_relative_to(m["mountPath"])]
    assert holding, f"{path} is in no volume of {container['name']}"
    mount = max(holding, key=lambda m: len(m["mountPath"]))
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    return mount, volume


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (its built-in kustomize) is not installed")
def test_rendered_as_kustomize_renders_it(objects: list[dict[str, Any]]) -> None:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(KUSTOMIZATION_DIR)], capture_output=True, text=True, check=True
    ).stdout
    by_key = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(rendered)}
    assert by_key == {(o["kind"], o["metadata"]["name"]): o for o in objects}


def test_every_object_is_valid_against_the_kubernetes_schema(objects: list[dict[str, Any]]) -> None:
    assert {o["kind"] for o in objects} == {
        *CLUSTER_SCOPED,
        *WORKLOADS,
        "ConfigMap",
        "Service",
        "ServiceAccount",
    }
    for item in objects:
        assert kubernetes_validate.validate(item, KUBERNETES_VERSION, strict=True) == KUBERNETES_VERSION
    misspelt = copy.deepcopy(named(objects, "DaemonSet", "gpu-finops-collector"))
    pod_spec(misspelt)["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(misspelt, KUBERNETES_VERSION, strict=True)


def test_the_collector_reads_the_host_read_only_as_its_node_with_its_token(objects: list[dict[str, Any]]) -> None:
    daemonset = named(objects, "DaemonSet", "gpu-finops-collector")
    spec = pod_spec(daemonset)
    (container,) = spec["containers"]
    options = parsed_options(container["command"][1:])
    for option, host_path in (("proc_root", "/proc"), ("sys_root", "/sys")):
        mount, volume = mount_of(spec, container, str(options[option]))
        assert mount["mountPath"] == str(options[option]) and mount["readOnly"] is True
        assert volume["hostPath"]["path"] == host_path
    assert env_value(container, "NODE_NAME")["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert options["node"] == "$(NODE_NAME)"
    # Its node's token alone: copied from the Secret by the init container, which alone mounts the Secret.
    mount, volume = mount_of(spec, container, str(options["token_file"]))
    assert mount["readOnly"] is True and volume["emptyDir"]["medium"] == "Memory"
    assert not any("secret" in mount_of(spec, container, m["mountPath"])[1] for m in container["volumeMounts"])
    (select,) = spec["initContainers"]
    source, target = select["command"][1:]
    assert select["command"][0] == "cp" and target == str(options["token_file"])
    assert PurePosixPath(source).name == "$(NODE_NAME)"
    assert env_value(select, "NODE_NAME")["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert mount_of(spec, select, source)[1]["secret"]["secretName"] == "gpu-finops-node-tokens"
    assert mount_of(spec, select, target)[1] == volume
    spool_mount, spool = mount_of(spec, container, str(options["spool_dir"]))
    assert spool["hostPath"]["type"] == "DirectoryOrCreate" and not spool_mount.get("readOnly")
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert "nvidia.com/gpu" not in str(container["resources"]), "the collector must not take GPUs from jobs"
    service_url = options["service_url"]
    api = named(objects, "Service", "gpu-finops-api")
    assert service_url == f"http://{api['metadata']['name']}:{api['spec']['ports'][0]['port']}"


def test_the_pods_import_may_only_get_and_list_pods_and_nodes(objects: list[dict[str, Any]]) -> None:
    role = named(objects, "ClusterRole", "gpu-finops-pods-import")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list"]}]
    binding = named(objects, "ClusterRoleBinding", "gpu-finops-pods-import")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "gpu-finops-pods-import",
    }
    cronjob = named(objects, "CronJob", "gpu-finops-pods-import")
    spec = pod_spec(cronjob)
    account = spec["serviceAccountName"]
    named(objects, "ServiceAccount", account)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": cronjob["metadata"]["namespace"]}
    ]
    assert not [o for o in objects if o["kind"] in {"Role", "RoleBinding"}]
    for workload, other in workloads(objects):
        if workload is not cronjob:
            assert other["automountServiceAccountToken"] is False, workload["metadata"]["name"]
            assert "serviceAccountName" not in other


def test_the_import_reads_the_listing_the_init_container_writes(objects: list[dict[str, Any]]) -> None:
    spec = pod_spec(named(objects, "CronJob", "gpu-finops-pods-import"))
    (lister,), (importer,) = spec["initContainers"], spec["containers"]
    assert lister["command"][:2] == ["python", "/opt/gpu-finops/list_cluster.py"]
    _, script = mount_of(spec, lister, lister["command"][1])
    generated = named(objects, "ConfigMap", script["configMap"]["name"])
    assert "def list_all(" in generated["data"][PurePosixPath(lister["command"][1]).name]
    directory = lister["command"][2]
    options = parsed_options(importer["command"][1:])
    assert options["complete"] is True
    read = [options["file"], str(options["nodes"])]
    assert read == [f"{directory}/pods.json", f"{directory}/nodes.json"]
    for path in read:
        assert mount_of(spec, importer, path)[1] == mount_of(spec, lister, directory)[1]
        assert mount_of(spec, importer, path)[1]["emptyDir"] == {}


def test_every_command_and_option_is_the_cli_s(objects: list[dict[str, Any]]) -> None:
    commands = {
        container["name"]: parse([expand(a, container) for a in container["command"][1:]])[1:]
        for _, container in gpu_finops_containers(objects)
    }
    assert commands == {
        "api": ["serve"],
        "scheduler": ["scheduler"],
        "db-upgrade": ["db", "upgrade"],
        "dashboard": ["dashboard"],
        "collector": ["collector"],
        "import": ["import", "pods"],
    }
    assert (
        "--no-scheduler"
        in named(objects, "Deployment", "gpu-finops-api")["spec"]["template"]["spec"]["containers"][0]["command"]
    )
    with pytest.raises(CommandLineError, match="no-such-option"):
        parse(["collector", "--service-url", "http://x", "--no-such-option"])


def test_only_one_scheduler_and_it_migrates(objects: list[dict[str, Any]]) -> None:
    scheduler = named(objects, "Deployment", "gpu-finops-scheduler")
    assert scheduler["spec"]["replicas"] == 1 and scheduler["spec"]["strategy"] == {"type": "Recreate"}
    migrating = [
        workload["metadata"]["name"]
        for workload, spec in workloads(objects)
        for container in containers(spec)
        if container["command"][1:3] == ["db", "upgrade"]
    ]
    assert migrating == ["gpu-finops-scheduler"]
    dashboard = named(objects, "Deployment", "gpu-finops-dashboard")
    assert "--insecure-no-login" not in pod_spec(dashboard)["containers"][0]["command"]


def test_every_finops_variable_is_a_setting_or_an_option_s(objects: list[dict[str, Any]]) -> None:
    settings = {f"FINOPS_{name.upper()}" for name in Settings.model_fields}
    config_maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    for spec, container in gpu_finops_containers(objects):
        known = settings | environment_variables(container["command"][1:])
        names = {variable["name"] for variable in container.get("env", [])}
        for source in container.get("envFrom", []):
            names |= set(config_maps[source["configMapRef"]["name"]]["data"])
        finops = {name for name in names if name.startswith("FINOPS_")}
        assert finops <= known, (container["name"], finops - known)
        for name in finops:
            if name.endswith("_FILE"):
                value = env_value(container, name)["value"]
                _, volume = mount_of(spec, container, value)
                keys = documented_secrets()[volume["secret"]["secretName"]]
                assert PurePosixPath(value).name in keys, (name, value)
    assert "FINOPS_NO_SUCH_SETTING" not in settings


def test_ports_probes_and_services_agree_with_the_commands(objects: list[dict[str, Any]]) -> None:
    listening = {"serve": "port", "dashboard": "port", "scheduler": "metrics_port", "collector": "metrics_port"}
    pods = {}
    for workload, spec in workloads(objects):
        pods[workload["metadata"]["name"]] = spec
        for container in spec["containers"]:
            command = container["command"]
            if command[1] not in listening:
                continue
            port = parsed_options(command[1:])[listening[command[1]]]
            assert [p["containerPort"] for p in container["ports"]] == [port], container["name"]
            names = {p["name"]: p["containerPort"] for p in container["ports"]}
            for probe in ("readinessProbe", "livenessProbe"):
                action = container[probe].get("httpGet") or container[probe]["tcpSocket"]
                assert names.get(action["port"], action["port"]) == port, (container["name"], probe)
            address = parsed_options(command[1:]).get("host") or parsed_options(command[1:])["metrics_address"]
            assert address == "0.0.0.0", "probes reach the pod's address, not its loopback"
    for service in (o for o in objects if o["kind"] == "Service"):
        selected = [
            (workload, spec)
            for workload, spec in workloads(objects)
            if service["spec"]["selector"].items()
            <= workload["spec"].get("template", {}).get("metadata", {}).get("labels", {}).items()
        ]
        assert len(selected) == 1, service["metadata"]["name"]
        ports = {p["name"] for c in selected[0][1]["containers"] for p in c["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports


def test_images_are_this_version(objects: list[dict[str, Any]]) -> None:
    images = {container["image"] for _, spec in workloads(objects) for container in containers(spec)}
    assert images == {f"gpu-finops:{VERSION}"}


def test_central_pods_meet_the_restricted_pod_security_level(objects: list[dict[str, Any]]) -> None:
    for workload, spec in workloads(objects):
        for container in containers(spec):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False and context["readOnlyRootFilesystem"] is True
            assert context["capabilities"] == {"drop": ["ALL"]}
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        if workload["kind"] == "DaemonSet":
            continue  # root without capabilities, host PID namespace: the collector's comment says why
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 65534, "the image's user is `nobody`, not a number"
        assert not spec.get("hostPID") and not any("hostPath" in v for v in spec.get("volumes", []))


def documented_secrets() -> dict[str, set[str]]:
    """Secret name → keys, of every ``kubectl create secret generic`` in docs/deployment.md (``--from-file=DIR``
    counts as any key)."""
    text = (REPO_ROOT / "docs" / "deployment.md").read_text().replace("\\\n", " ")
    secrets: dict[str, set[str]] = {}
    for name, arguments in re.findall(r"kubectl -n gpu-finops create secret generic (\S+)([^\n]*)", text):
        keys = secrets.setdefault(name, set())
        for key in re.findall(r"--from-(?:literal|file)=([^=\s]+)=", arguments):
            keys.add(key)
        if re.search(r"--from-file=[^=\s]+(\s|$)", arguments):
            keys.add("*")
    return secrets


def referenced_secrets(objects: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Secret name → keys the pods read (``*`` for a whole Secret mounted)."""
    found: dict[str, set[str]] = {}
    for _, spec in workloads(objects):
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                found.setdefault(volume["secret"]["secretName"], set())
        for container in containers(spec):
            for variable in container.get("env", []):
                reference = variable.get("valueFrom", {}).get("secretKeyRef")
                if reference:
                    found.setdefault(reference["name"], set()).add(reference["key"])
                if variable["name"].endswith("_FILE") and "value" in variable:
                    _, volume = mount_of(spec, container, variable["value"])
                    found[volume["secret"]["secretName"]].add(PurePosixPath(variable["value"]).name)
    return found


def test_every_secret_read_is_one_the_docs_create(objects: list[dict[str, Any]]) -> None:
    documented, referenced = documented_secrets(), referenced_secrets(objects)
    assert (
        set(referenced)
        == set(documented)
        == {
            "gpu-finops-database",
            "gpu-finops-node-tokens",
            "gpu-finops-dashboard-oidc",
            "gpu-finops-sacct-ssh",
        }
    )
    for name, keys in referenced.items():
        assert keys <= documented[name] or "*" in documented[name], name
    assert not [o for o in objects if o["kind"] == "Secret"], "secrets are created, never committed"


def test_the_scheduler_reads_the_head_nodes_sacct_over_ssh_when_set_up(objects: list[dict[str, Any]]) -> None:
    """The ssh client's files come from an optional Secret (a site without Slurm creates none), readable by the
    pod's user, at the path of the FINOPS_SACCT_COMMAND that settings.yaml and docs/deployment.md give."""
    spec = pod_spec(named(objects, "Deployment", "gpu-finops-scheduler"))
    container = spec["containers"][0]
    (command,) = re.findall(r"# FINOPS_SACCT_COMMAND: (.+)", (KUSTOMIZATION_DIR / "settings.yaml").read_text())
    assert command.startswith("ssh -F /etc/gpu-finops/sacct-ssh/config ")
    mount, volume = mount_of(spec, container, "/etc/gpu-finops/sacct-ssh/config")
    assert mount["readOnly"] is True
    assert volume["secret"] == {"secretName": "gpu-finops-sacct-ssh", "optional": True, "defaultMode": 0o440}
    assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsUser"]
    assert command in (REPO_ROOT / "docs" / "deployment.md").read_text()
