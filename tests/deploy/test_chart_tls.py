"""The chart's optional TLS (``tls.enabled``): the certificate Secret mounted read-only in every
service, the settings pointing at its files (read back by kernel.tls), probes that still
work over TLS, and manifests that pass kubernetes-validate in strict mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from tests.deploy.chart import CHART, COMPONENTS, KUBE_VERSION, Manifest, one, render

TLS_DIR = "/etc/truerun/tls"
CLIENTS = ("coordinator", "gateway")  # the services that call other services over gRPC


def _render_tls(tmp_path: Path, client_auth: bool) -> list[Manifest]:
    path = tmp_path / "tls-values.yaml"
    tls = {"enabled": True, "secretName": "truerun-tls", "clientAuth": client_auth}
    path.write_text(yaml.safe_dump({"tls": tls}))
    return render(path)


def _pod(manifests: list[Manifest], component: str) -> dict[str, Any]:
    body = one(manifests, "Deployment", f"demo-truerun-{component}").body
    spec: dict[str, Any] = body["spec"]["template"]["spec"]
    return spec


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


@pytest.mark.parametrize("client_auth", [False, True], ids=["tls", "mtls"])
def test_tls_mounts_the_secret_and_sets_every_service_to_serve_it(
    tmp_path: Path, client_auth: bool
) -> None:
    manifests = _render_tls(tmp_path, client_auth)
    for manifest in manifests:
        kubernetes_validate.validate(manifest.body, KUBE_VERSION, strict=True)
    for component in COMPONENTS:
        pod = _pod(manifests, component)
        (volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
        assert volume["secret"]["secretName"] == "truerun-tls"
        container = pod["containers"][0]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "tls"]
        assert mount == {"name": "tls", "mountPath": TLS_DIR, "readOnly": True}
        env = _env(container)
        assert env["TRUERUN_TLS_CERT_FILE"] == f"{TLS_DIR}/tls.crt"
        assert env["TRUERUN_TLS_KEY_FILE"] == f"{TLS_DIR}/tls.key"
        assert ("TRUERUN_TLS_CA_FILE" in env) == (component in CLIENTS), component
        assert ("TRUERUN_TLS_CLIENT_CERT_FILE" in env) == (client_auth and component in CLIENTS)
        requires_certs = client_auth and component != "gateway"  # the gateway serves browsers
        assert ("TRUERUN_TLS_CLIENT_CA_FILE" in env) == requires_certs, component
        probe = container["readinessProbe"]
        if component == "gateway":
            assert probe["httpGet"]["scheme"] == "HTTPS"
        else:
            # Kubernetes' gRPC probe has no TLS: it would fail against a TLS port
            assert "grpc" not in probe and probe["tcpSocket"] == {"port": "grpc"}
        # a TCP connect, which TLS does not change
        assert container["livenessProbe"]["tcpSocket"] == {"port": "metrics"}


def test_without_tls_nothing_is_mounted_and_probes_stay_grpc() -> None:
    manifests = render(None)
    for component in COMPONENTS:
        pod = _pod(manifests, component)
        assert all(v["name"] != "tls" for v in pod["volumes"])
        assert not [n for n in _env(pod["containers"][0]) if n.startswith("TRUERUN_TLS_")]


def test_tls_without_a_secret_name_is_refused_by_the_schema() -> None:
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError) as err:
        chart.validate_schema({"tls": {"enabled": True}})
    assert "at '/tls/secretName': minLength: got 0, want 1" in str(err.value)
