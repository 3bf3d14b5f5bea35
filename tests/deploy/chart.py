"""Offline Helm: lint, schema and render through Helm's own Go code (helm-python-sdk), and the
rendered manifests as Python objects for kubernetes-validate."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "truerun"
HA_VALUES = CHART / "ci" / "ha-values.yaml"
# On an existing CloudNativePG cluster and Redis, with ingresses, ServiceMonitor and dashboard.
CNPG_VALUES = CHART / "ci" / "cnpg-values.yaml"
BROKEN_VALUES = Path(__file__).resolve().parent / "broken-values.yaml"
# A version kubernetes-validate bundles and the chart's kubeVersion (>=1.25) admits.
KUBE_VERSION = "1.33.0"
COMPONENTS = ("coordinator", "capacity", "reconciler", "gateway")


def values(path: Path | None) -> dict[str, Any]:
    return {} if path is None else helm.values_from_yaml(path.read_text(encoding="utf-8"))


def default_values() -> dict[str, Any]:
    with helm.Chart.load(CHART) as chart:
        return chart.values


@dataclass(frozen=True)
class Manifest:
    template: str
    body: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body["kind"])

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


def render(path: Path | None) -> list[Manifest]:
    with helm.Chart.load(CHART) as chart:
        files = chart.render(values(path), name="demo", namespace="truerun", is_install=True)
    return list(_documents(files))


def _documents(files: dict[str, str]) -> Iterator[Manifest]:
    for template, text in sorted(files.items()):
        if not template.endswith(".yaml"):
            continue  # NOTES.txt
        for body in yaml.safe_load_all(text):
            if body:
                yield Manifest(template, body)


def secret_files(pod_spec: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """The files of a pod's "secrets" volume: path -> (Secret, key), whether the volume is one
    Secret or projects several (secrets.databaseUrlFrom)."""
    files: dict[str, tuple[str, str]] = {}
    for volume in pod_spec["volumes"]:
        if volume["name"] != "secrets":
            continue
        if "secret" in volume:
            sources = [{"name": volume["secret"]["secretName"], **volume["secret"]}]
        else:
            sources = [source["secret"] for source in volume["projected"]["sources"]]
        for source in sources:
            for item in source["items"]:
                files[item["path"]] = (source["name"], item["key"])
    return files


def probe_handler(probe: dict[str, Any]) -> dict[str, Any]:
    """What a probe checks, without its timing."""
    return {k: v for k, v in probe.items() if k in ("httpGet", "tcpSocket", "grpc", "exec")}


def one(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    found = [m for m in manifests if m.kind == kind and m.name == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]
