"""The chart's outward surfaces, offline: separate liveness and readiness probes, the
Ingresses (REST/SSE and gRPC), the ServiceMonitor (a CRD kubernetes-validate cannot check, so
its shape is checked against the rendered Services), the TLS Secret made from PEM values,
resource defaults and the Grafana dashboard, whose every metric name the code registers."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from prometheus_client.metrics_core import Metric

from gateway.metrics import GatewayMetrics
from services.metrics import Metrics
from tests.deploy.chart import (
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
)

DASHBOARD = CHART / "dashboards" / "truerun.json"
TLS_SECRET = {"enabled": True, "secretName": "truerun-tls"}


def _render_with(tmp_path: Path, overrides: dict[str, Any]) -> list[Manifest]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(overrides))
    return render(path)


def _containers(manifests: list[Manifest]) -> list[dict[str, Any]]:
    return [
        container
        for m in manifests
        if m.kind == "Deployment"
        for container in m.body["spec"]["template"]["spec"]["containers"]
    ]


@pytest.mark.parametrize("case", ["default", "ha", "cnpg", "tls"])
def test_liveness_never_equals_readiness(tmp_path: Path, case: str) -> None:
    """A restart for what only needs taking out of the Service (a drain, a slow dependency)
    would turn a hiccup into an outage: every container's two probes check different things."""
    files = {"default": None, "ha": HA_VALUES, "cnpg": CNPG_VALUES}
    if case == "tls":
        manifests = _render_with(tmp_path, {"tls": TLS_SECRET})
    else:
        manifests = render(files[case])
    containers = _containers(manifests)
    assert len(containers) == len(COMPONENTS)
    for container in containers:
        liveness = probe_handler(container["livenessProbe"])
        readiness = probe_handler(container["readinessProbe"])
        assert liveness and readiness, container["name"]
        assert liveness != readiness, f"{container['name']}: liveness equals readiness"


def test_every_container_states_its_resources() -> None:
    manifests = render(None)
    job = one(manifests, "Job", "demo-truerun-migrate").body["spec"]["template"]["spec"]
    for container in [*_containers(manifests), *job["containers"]]:
        resources = container["resources"]
        assert set(resources["requests"]) >= {"cpu", "memory"}, container["name"]
        assert resources["limits"]["memory"], container["name"]
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError) as err:
        chart.validate_schema({"gateway": {"resources": {"requests": {"cpu": None}}}})
    assert "at '/gateway/resources/requests': missing property 'cpu'" in str(err.value)


def _services(manifests: list[Manifest]) -> dict[str, dict[str, Any]]:
    return {m.name: m.body for m in manifests if m.kind == "Service"}


def _service_port_names(service: dict[str, Any]) -> set[str]:
    return {p["name"] for p in service["spec"]["ports"]}


def test_no_ingress_service_monitor_or_dashboard_by_default() -> None:
    kinds = {m.kind for m in render(None)} | {m.kind for m in render(HA_VALUES)}
    assert not kinds & {"Ingress", "ServiceMonitor"}
    assert not [m for m in render(None) if m.name == "demo-truerun-dashboard"]


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_ingresses_route_rest_to_the_gateway_and_grpc_to_the_coordinator(
    tmp_path: Path, tls: bool
) -> None:
    overrides = values_of(CNPG_VALUES)
    if tls:
        overrides["tls"] = TLS_SECRET
    manifests = _render_with(tmp_path, overrides)
    services = _services(manifests)
    expected = {
        "demo-truerun-gateway": ("truerun.example.com", "demo-truerun-gateway", "http"),
        "demo-truerun-grpc": ("grpc.truerun.example.com", "demo-truerun-coordinator", "grpc"),
    }
    ingresses = {m.name: m.body for m in manifests if m.kind == "Ingress"}
    assert set(ingresses) == set(expected)
    for name, (host, service, port) in expected.items():
        body = ingresses[name]
        kubernetes_validate.validate(body, KUBE_VERSION, strict=True)
        (rule,) = body["spec"]["rules"]
        assert rule["host"] == host
        backend = rule["http"]["paths"][0]["backend"]["service"]
        assert backend == {"name": service, "port": {"name": port}}
        assert port in _service_port_names(services[service])  # a port the Service has
        assert body["spec"]["tls"] == [{"hosts": [host], "secretName": "truerun-example-com-tls"}]
        assert body["spec"]["ingressClassName"] == "nginx"
    protocol = "nginx.ingress.kubernetes.io/backend-protocol"
    grpc_annotations = ingresses["demo-truerun-grpc"]["metadata"]["annotations"]
    assert grpc_annotations[protocol] == ("GRPCS" if tls else "GRPC")
    gateway_annotations = ingresses["demo-truerun-gateway"]["metadata"]["annotations"]
    assert gateway_annotations.get(protocol) == ("HTTPS" if tls else None)
    assert gateway_annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"  # SSE


def values_of(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_the_service_monitor_scrapes_each_service_once(tmp_path: Path, tls: bool) -> None:
    overrides: dict[str, Any] = {"serviceMonitor": {"enabled": True, "labels": {"team": "x"}}}
    if tls:
        overrides["tls"] = TLS_SECRET
    manifests = _render_with(tmp_path, overrides)
    monitor = one(manifests, "ServiceMonitor", "demo-truerun").body
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["team"] == "x"
    spec = monitor["spec"]
    assert set(spec) <= {"selector", "namespaceSelector", "endpoints", "targetLabels"}
    assert spec["namespaceSelector"] == {"matchNames": ["truerun"]}
    selected = {
        name: body
        for name, body in _services(manifests).items()
        if _matches(spec["selector"]["matchLabels"], body["metadata"]["labels"])
    }
    # one Service per component, not the headless twins listing the same pods again
    assert sorted(selected) == sorted(f"demo-truerun-{c}" for c in COMPONENTS)
    for endpoint in spec["endpoints"]:
        for name, service in selected.items():
            assert endpoint["port"] in _service_port_names(service), name
        assert endpoint["path"] == "/metrics"
        assert re.fullmatch(r"\d+s", endpoint["interval"])
        if tls:
            assert endpoint["scheme"] == "https"
            assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": "truerun-tls", "key": "ca.crt"}
        else:
            assert "scheme" not in endpoint and "tlsConfig" not in endpoint
    for label in spec["targetLabels"]:
        assert all(label in s["metadata"]["labels"] for s in selected.values())


def test_the_tls_secret_can_be_made_from_pem_values(tmp_path: Path) -> None:
    pem = {"certificate": "CERT-PEM", "key": "KEY-PEM", "ca": "CA-PEM"}
    manifests = _render_with(tmp_path, {"tls": {"enabled": True, **pem}})
    secret = one(manifests, "Secret", "demo-truerun-tls").body
    kubernetes_validate.validate(secret, KUBE_VERSION, strict=True)
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["stringData"] == {"tls.crt": "CERT-PEM", "tls.key": "KEY-PEM", "ca.crt": "CA-PEM"}
    for component in COMPONENTS:
        pod = one(manifests, "Deployment", f"demo-truerun-{component}").body["spec"]["template"]
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "tls"]
        assert volume["secret"]["secretName"] == "demo-truerun-tls"
    # a named Secret wins: the chart creates none
    named = _render_with(tmp_path, {"tls": {**TLS_SECRET, **pem}})
    assert not [m for m in named if m.kind == "Secret" and m.name == "demo-truerun-tls"]
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError) as err:
        chart.validate_schema({"tls": {"enabled": True, "certificate": "CERT-PEM"}})
    assert "at '/tls/key': minLength: got 0, want 1" in str(err.value)  # all three or none


def test_cnpg_values_read_the_database_url_from_the_clusters_app_secret(tmp_path: Path) -> None:
    manifests = render(CNPG_VALUES)
    for component in COMPONENTS:
        pod = one(manifests, "Deployment", f"demo-truerun-{component}").body["spec"]["template"]
        files = secret_files(pod["spec"])
        if component != "gateway":
            assert files["database-url"] == ("truerun-db-app", "uri"), component
        others = {secret for path, (secret, _) in files.items() if path != "database-url"}
        # the reconciler reads only the database URL
        assert others == (set() if component == "reconciler" else {"truerun-secrets"}), component
    # without existingSecret: the chart's own Secret carries the rest, not the URL
    own = _render_with(tmp_path, {"secrets": {"databaseUrlFrom": {"name": "db-app", "key": "uri"}}})
    assert "database-url" not in one(own, "Secret", "demo-truerun-secrets").body["stringData"]
    assert not [m for m in own if m.name == "demo-truerun-migrate" and m.kind == "Secret"]
    coordinator = one(own, "Deployment", "demo-truerun-coordinator").body["spec"]["template"]
    assert secret_files(coordinator["spec"])["database-url"] == ("db-app", "uri")
    for manifest in own:
        kubernetes_validate.validate(manifest.body, KUBE_VERSION, strict=True)


# PromQL words that are not metric names: functions, aggregations, keywords.
_PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or"}
_PROMETHEUS_OWN = {"up"}  # written by Prometheus for every target, not by truerun


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers outside label matchers,
    ranges, strings and grouping clauses that are not called as functions."""
    text = re.sub(r'"[^"]*"', "", expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?", text):
        if match.group(1) is None and match.group(0) not in _PROMQL_WORDS:
            names.add(match.group(0))
    return names


def test_metric_names_finds_every_selected_name() -> None:
    expr = 'histogram_quantile(0.95, sum by (le, tier) (rate(a_bucket{x="y z"}[5m]))) / b_total'
    assert metric_names(expr) == {"a_bucket", "b_total"}


def _sample_names(family: Metric) -> set[str]:
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    return {family.name + s for s in suffixes.get(family.type, ("",))}


def test_the_dashboard_uses_only_metrics_the_code_registers() -> None:
    metrics = Metrics()
    metrics.count_refusals({"other_owner": 1})
    families = [*metrics.registry.collect(), *GatewayMetrics().registry.collect()]
    registered = set().union(*(_sample_names(f) for f in families))
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    expressions += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    used: set[str] = set()
    for expr in expressions:
        names = metric_names(expr.replace("label_values(", "(").replace(", job)", ")"))
        assert names, expr
        used |= names
    unknown = used - registered - _PROMETHEUS_OWN
    assert not unknown, f"the dashboard asks for metrics nobody registers: {sorted(unknown)}"
    assert len(used & registered) >= 10  # it covers runs and long tasks, not one metric


def test_the_dashboard_ships_as_a_config_map_for_grafana() -> None:
    config_map = one(render(CNPG_VALUES), "ConfigMap", "demo-truerun-dashboard").body
    kubernetes_validate.validate(config_map, KUBE_VERSION, strict=True)
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads(config_map["data"]["truerun.json"])
    assert shipped == json.loads(DASHBOARD.read_text())
