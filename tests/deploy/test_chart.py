"""The Helm chart, offline: Helm's lint, values schema and render (helm-python-sdk), and every
rendered manifest against the Kubernetes schemas (kubernetes-validate, strict)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from kernel.config import CONFIG_FILE_ENV, Settings, env_name, is_secret
from tests.deploy.chart import (
    BROKEN_VALUES,
    CHART,
    CNPG_VALUES,
    COMPONENTS,
    HA_VALUES,
    KUBE_VERSION,
    Manifest,
    one,
    probe_handler,
    render,
    secret_files,
    values,
)

VALUES_FILES = pytest.mark.parametrize(
    "values_file", [None, HA_VALUES, CNPG_VALUES], ids=["default", "ha", "cnpg"]
)
# Custom resources kubernetes-validate has no schema for; test_chart_surfaces.py checks them.
CUSTOM_KINDS = {"ServiceMonitor"}


@VALUES_FILES
def test_lint_passes(values_file: Path | None) -> None:
    report = helm.lint(CHART, values(values_file), strict=True, kube_version=f"v{KUBE_VERSION}")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []  # warnings included


@VALUES_FILES
def test_values_pass_the_schema(values_file: Path | None) -> None:
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(values(values_file))


def test_broken_values_are_rejected_by_the_schema() -> None:
    broken = values(BROKEN_VALUES)
    with helm.Chart.load(CHART) as chart:
        with pytest.raises(helm.HelmValuesError) as err:
            chart.validate_schema(broken)
        with pytest.raises(helm.HelmValuesError):  # nothing renders either
            chart.render(broken, name="demo", namespace="truerun")
    message = str(err.value)
    print(message)  # the schema's own words, as `helm install` would show them
    for expected in (
        "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'",
        "at '/secrets/databaseUrl': 'sqlite:///truerun.db' does not match pattern",
        "at '/coordinator/replicas': got string, want integer",
        "at '/coordinator': additional properties 'replica' not allowed",
        "at '/config': additional properties 'database_url' not allowed",
    ):
        assert expected in message
    report = helm.lint(CHART, broken, strict=True)
    assert report["errors"], "lint must fail on the broken values"


@VALUES_FILES
def test_every_rendered_manifest_passes_kubernetes_validate_strict(
    values_file: Path | None,
) -> None:
    manifests = render(values_file)
    assert len(manifests) >= 12
    for manifest in manifests:
        if manifest.kind not in CUSTOM_KINDS:
            kubernetes_validate.validate(manifest.body, KUBE_VERSION, strict=True)


def test_the_kubernetes_validate_command_passes_the_ha_manifests(tmp_path: Path) -> None:
    # The same check through the command line CI tools would use, one file per manifest.
    paths = []
    for i, manifest in enumerate(render(HA_VALUES)):
        path = tmp_path / f"{i:02d}-{manifest.kind}-{manifest.name}.yaml"
        path.write_text(yaml.safe_dump(manifest.body))
        paths.append(str(path))
    command = Path(sys.executable).parent / "kubernetes-validate"
    result = subprocess.run(
        [str(command), "--strict", "--quiet", "-k", KUBE_VERSION, *paths],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_kubernetes_validate_strict_rejects_an_unknown_field() -> None:
    deployment = copy.deepcopy(one(render(None), "Deployment", "demo-truerun-coordinator").body)
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["grpcc"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSION, strict=True)


def _container(manifests: list[Manifest], component: str) -> dict[str, Any]:
    deployment = one(manifests, "Deployment", f"demo-truerun-{component}")
    containers = deployment.body["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


@VALUES_FILES
def test_one_deployment_per_service_with_health_probes(values_file: Path | None) -> None:
    manifests = render(values_file)
    assert sorted(m.name for m in manifests if m.kind == "Deployment") == sorted(
        f"demo-truerun-{c}" for c in COMPONENTS
    )
    for component in COMPONENTS:
        container = _container(manifests, component)
        assert container["args"] == [component]
        # liveness: the process is alive; readiness: it serves (test_chart_surfaces.py checks
        # they differ in every container and every values file)
        assert probe_handler(container["livenessProbe"]) == {"tcpSocket": {"port": "metrics"}}
        readiness = probe_handler(container["readinessProbe"])
        if component == "gateway":
            assert readiness == {"httpGet": {"path": "/healthz", "port": "http"}}
        else:
            assert readiness == {"grpc": {"port": 7233}}  # Kubernetes' native gRPC health probe
        assert container["resources"]["requests"]["memory"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        pod = one(manifests, "Deployment", f"demo-truerun-{component}").body["spec"]["template"]
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


def test_default_values_are_a_single_replica_install() -> None:
    manifests = render(None)
    kinds = {m.kind for m in manifests}
    assert not kinds & {"HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy"}
    for component in COMPONENTS:
        assert (
            one(manifests, "Deployment", f"demo-truerun-{component}").body["spec"]["replicas"] == 1
        )


def test_ha_values_scale_out_with_budgets_and_network_policies() -> None:
    manifests = render(HA_VALUES)
    deployments = {c: one(manifests, "Deployment", f"demo-truerun-{c}").body for c in COMPONENTS}
    # the HPA owns replicas where it is on; the reconciler has a fixed count
    assert "replicas" not in deployments["coordinator"]["spec"]
    assert deployments["reconciler"]["spec"]["replicas"] == 2
    hpas = {m.name: m.body["spec"] for m in manifests if m.kind == "HorizontalPodAutoscaler"}
    assert set(hpas) == {f"demo-truerun-{c}" for c in ("coordinator", "capacity", "gateway")}
    assert hpas["demo-truerun-coordinator"]["minReplicas"] == 3
    pdbs = [m for m in manifests if m.kind == "PodDisruptionBudget"]
    assert sorted(p.name for p in pdbs) == sorted(f"demo-truerun-{c}" for c in COMPONENTS)
    for pdb in pdbs:
        assert pdb.body["spec"]["maxUnavailable"] == 1
    policies = {m.name: m.body["spec"] for m in manifests if m.kind == "NetworkPolicy"}
    assert set(policies) == {f"demo-truerun-{c}" for c in COMPONENTS}
    capacity_from = policies["demo-truerun-capacity"]["ingress"][0]["from"]
    # the coordinator claims; the gateway reads occupancy and agents
    assert capacity_from == [
        {
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "truerun",
                    "app.kubernetes.io/instance": "demo",
                    "app.kubernetes.io/component": component,
                }
            }
        }
        for component in ("coordinator", "gateway")
    ]
    gateway_env = _env(_container(manifests, "gateway"))
    assert gateway_env["TRUERUN_CAPACITY_ADDR"] == "dns:///demo-truerun-capacity-headless:7233"
    assert gateway_env["TRUERUN_SERVICES_ADDR"] == "demo-truerun-coordinator:7233"
    coordinator_from = policies["demo-truerun-coordinator"]["ingress"][0]["from"]
    assert {"namespaceSelector": {"matchLabels": {"truerun.dev/runtime-agents": "true"}}} in (
        coordinator_from
    )
    gateway_pods = {
        "app.kubernetes.io/name": "truerun",
        "app.kubernetes.io/instance": "demo",
        "app.kubernetes.io/component": "gateway",
    }
    assert {"podSelector": {"matchLabels": gateway_pods}} in coordinator_from
    assert one(manifests, "Service", "demo-truerun-coordinator").body["spec"]["type"] == (
        "LoadBalancer"
    )


@VALUES_FILES
def test_migrations_run_as_a_pre_install_and_pre_upgrade_hook(values_file: Path | None) -> None:
    manifests = render(values_file)
    job = one(manifests, "Job", "demo-truerun-migrate").body
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["migrate"]
    assert _env(container)["TRUERUN_DATABASE_URL_FILE"] == "/etc/truerun/secrets/database-url"
    secret_name, key = secret_files(job["spec"]["template"]["spec"])["database-url"]
    if values_file is None:
        # pre-install hooks run before the release's Secret exists: the hook has its own,
        # created first (a lower weight)
        hook_secret = one(manifests, "Secret", secret_name).body
        assert int(hook_secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
            annotations["helm.sh/hook-weight"]
        )
        assert hook_secret["stringData"]["database-url"].startswith("postgresql://")
    elif values_file == CNPG_VALUES:
        # CloudNativePG's application Secret, which exists before any hook runs
        assert (secret_name, key) == ("truerun-db-app", "uri")
        assert not [m for m in manifests if m.kind == "Secret"]
    else:
        assert (secret_name, key) == ("truerun-secrets", "database-url")  # existingSecret
        assert not [m for m in manifests if m.kind == "Secret"]


@VALUES_FILES
def test_secrets_reach_the_pods_as_mounted_files_only(values_file: Path | None) -> None:
    manifests = render(values_file)
    secret_fields = {env_name(f) for f in fields(Settings) if is_secret(f)}
    for component in COMPONENTS:
        container = _container(manifests, component)
        env = _env(container)
        assert not secret_fields & set(env), "a secret as a plain variable"
        pod = one(manifests, "Deployment", f"demo-truerun-{component}").body["spec"]["template"]
        mounted = set(secret_files(pod["spec"]))
        wanted = {
            value.removeprefix("/etc/truerun/secrets/")
            for name, value in env.items()
            if name.endswith("_FILE") and name != CONFIG_FILE_ENV
        }
        assert wanted == mounted, component
        assert ("database-url" in mounted) == (component != "gateway"), component
    config_map = one(manifests, "ConfigMap", "demo-truerun-config").body
    assert "postgresql://" not in json.dumps(config_map)


def test_the_rendered_config_file_is_read_by_settings(tmp_path: Path) -> None:
    manifests = render(HA_VALUES)
    toml = one(manifests, "ConfigMap", "demo-truerun-config").body["data"]["truerun.toml"]
    path = tmp_path / "truerun.toml"
    path.write_text(toml)
    settings = Settings.from_env({CONFIG_FILE_ENV: str(path)})
    for key, value in values(HA_VALUES)["config"].items():
        assert getattr(settings, key) == value, key


@VALUES_FILES
def test_every_variable_the_chart_sets_is_a_setting(values_file: Path | None) -> None:
    # A renamed setting would otherwise be ignored silently by the pods.
    known = {CONFIG_FILE_ENV}
    for f in fields(Settings):
        known.add(env_name(f))
        if is_secret(f):
            known.add(f"{env_name(f)}_FILE")
    manifests = render(values_file)
    containers = [_container(manifests, c) for c in COMPONENTS]
    containers.append(
        one(manifests, "Job", "demo-truerun-migrate").body["spec"]["template"]["spec"][
            "containers"
        ][0]
    )
    for container in containers:
        unknown = {n for n in _env(container) if n.startswith("TRUERUN_")} - known
        assert not unknown, f"{container['name']} sets {unknown}, which no setting reads"


def test_the_schema_offers_only_non_secret_settings_with_their_types() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    offered = schema["properties"]["config"]["properties"]
    kinds = {f.name: f.type for f in fields(Settings) if not is_secret(f)}
    json_types = {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}
    for key, spec in offered.items():
        assert key in kinds, f"config.{key} is not a non-secret setting"
        if "type" in spec:
            assert spec["type"] == json_types[str(kinds[key])], key
    assert schema["properties"]["config"]["additionalProperties"] is False


def test_the_webhook_key_reaches_only_the_coordinator_and_only_when_given(tmp_path: Path) -> None:
    """secrets.webhookKey (TRUERUN_WEBHOOK_KEY) is mounted into the coordinator, which serves
    WebhookService; with existingSecret only when existingSecretHasWebhookKey says it is
    there (a key the Secret lacks would stop the pod from starting)."""

    def mounted(overrides: str) -> dict[str, set[str]]:
        path = tmp_path / "values.yaml"
        path.write_text(overrides, encoding="utf-8")
        manifests = render(path)
        found = {}
        for component in COMPONENTS:
            pod = one(manifests, "Deployment", f"demo-truerun-{component}").body["spec"]
            found[component] = set(secret_files(pod["template"]["spec"]))
        return found

    given = mounted("secrets:\n  webhookKey: k3y\n")
    assert "webhook-key" in given["coordinator"]
    assert all("webhook-key" not in given[c] for c in COMPONENTS if c != "coordinator")
    assert "webhook-key" not in mounted("{}\n")["coordinator"]
    existing = "secrets:\n  existingSecret: mine\n"
    assert "webhook-key" not in mounted(existing)["coordinator"]
    assert (
        "webhook-key" in mounted(existing + "  existingSecretHasWebhookKey: true\n")["coordinator"]
    )
