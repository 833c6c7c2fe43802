"""The Helm chart in helm/loopgate, checked without a cluster and without a ``helm`` binary.

What runs here:
- ``values.yaml`` and every ``ci/*-values.yaml`` override validate against ``values.schema.json``
  (jsonschema, draft-07), and the schema rejects the mistakes it exists to catch.
- Every template is rendered by the real Helm engine: ``helm-python-sdk`` binds Helm's own Go SDK
  (v4) through a shared library shipped in its wheel, so ``render`` is ``helm template`` (schema
  validation included) and ``lint`` is ``helm lint``, minus a cluster. Each rendered manifest must
  parse as YAML and carry the kinds and fields the chart promises.
- The rendered gateway config loads with the gateway's own loader (what ``loopgate check-config`` runs),
  and the rendered container (its args, env and config) runs as a real ``loopgate serve`` process
  answering its probe paths and exiting cleanly on SIGTERM within the grace period.
- When a ``helm`` binary is on PATH, ``helm lint --strict`` and ``helm template`` run too.
Not checked here: the manifests against a Kubernetes API server's OpenAPI schemas (no cluster).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from subprocess import STDOUT, Popen
from types import ModuleType
from typing import Any

import httpx
import jsonschema
import pytest
import redis
import yaml

from gateway.config import parse_config
from tests.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "loopgate"
CI_VALUES = sorted(CHART.glob("ci/*-values.yaml"))
RELEASE, NAMESPACE = "demo", "prod"
FULLNAME = "demo-loopgate"
TLS_MOUNT = "/etc/loopgate/redis-tls"  # where the chart mounts the store's TLS Secret
# Only PING is sent (the readiness check): no keys are written, so the db needs no lock or flush.
TEST_REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # set by tests/conftest.py
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}")


def _load_yaml(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict), f"{path} is not a mapping"
    return loaded


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's coalescing: maps merge key by key, anything else replaces, and a null deletes the key."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
DEFAULTS = _load_yaml(CHART / "values.yaml")


def _schema_errors(values: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(SCHEMA)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(values)]


# --- values and schema (jsonschema) --------------------------------------------------------------


def test_schema_is_a_valid_draft7_schema_that_closes_every_section() -> None:
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    assert SCHEMA["additionalProperties"] is False
    # Every key of values.yaml is described, so no value escapes type checking.
    assert set(DEFAULTS) == set(SCHEMA["properties"])
    for section in ("image", "store", "probes", "autoscaling", "podDisruptionBudget", "serviceMonitor",
                    "topologySpread", "service"):
        assert SCHEMA["properties"][section]["additionalProperties"] is False, section


@pytest.mark.parametrize("path", [CHART / "values.yaml", *CI_VALUES], ids=lambda p: p.name)
def test_values_files_validate_against_the_schema(path: Path) -> None:
    values = _merge(DEFAULTS, _load_yaml(path))
    assert _schema_errors(values) == []


def test_ci_overrides_cover_every_redis_mode_the_hpa_and_the_edge_objects() -> None:
    names = {p.name for p in CI_VALUES}
    assert {"cluster-values.yaml", "sentinel-values.yaml", "tls-values.yaml", "hpa-values.yaml",
            "edge-values.yaml"} <= names


@pytest.mark.parametrize(("override", "where"), [
    ({"replicaCount": 0}, "replicaCount"),
    ({"replicaCoutn": 3}, ""),
    ({"workers": 0}, "workers"),
    ({"logLevel": "verbose"}, "logLevel"),
    ({"image": {"pullPolicy": "Sometimes"}}, "image/pullPolicy"),
    ({"store": {"url": "memory://"}}, "store/url"),
    ({"store": {"wait_replica": 1}}, "store"),
    ({"store": {"wait_replicas": -1}}, "store/wait_replicas"),
    ({"store": {"sentinel": {"master": "m", "nodes": ["no-port"]}}}, "store/sentinel/nodes/0"),
    ({"store": {"tls": {"enabled": "yes"}}}, "store/tls/enabled"),
    ({"config": {"store": {"url": "redis://x"}}}, "config/store"),
    ({"config": {"server": {"port": 9000}}}, "config/server/port"),
    ({"config": {"modles": {}}}, "config"),
    ({"secretEnv": [{"name": "NOT-A-VAR", "key": "k"}]}, "secretEnv/0/name"),
    ({"secretEnv": [{"name": "A"}]}, "secretEnv/0"),
    ({"terminationGracePeriodSeconds": 10}, "terminationGracePeriodSeconds"),
    ({"autoscaling": {"targetCPUUtilizationPercentage": 150}}, "autoscaling/targetCPUUtilizationPercentage"),
    ({"podDisruptionBudget": {"maxUnavailable": 0}}, "podDisruptionBudget/maxUnavailable"),
    ({"topologySpread": {"zone": {"whenUnsatisfiable": "Never"}}}, "topologySpread/zone/whenUnsatisfiable"),
    ({"serviceMonitor": {"interval": "soon"}}, "serviceMonitor/interval"),
    ({"resources": {"requests": {"memory": "lots"}}}, "resources/requests/memory"),
    ({"service": {"port": 70000}}, "service/port"),
    ({"ingress": {"enabled": True, "hosts": [{"host": "x", "paths": [{"path": "api", "pathType": "Prefix"}]}]}},
     "ingress/hosts/0/paths/0/path"),
    ({"ingress": {"tsl": []}}, "ingress"),
    ({"networkPolicy": {"enabled": "yes"}}, "networkPolicy/enabled"),
])
def test_the_schema_rejects_bad_values(override: dict[str, Any], where: str) -> None:
    errors = _schema_errors(_merge(DEFAULTS, override))
    assert errors, f"{override} was accepted"
    assert any(e.split(": ", 1)[0] == where for e in errors), errors


# --- rendering with the Helm engine ---------------------------------------------------------------


@pytest.fixture(scope="module")
def helm() -> ModuleType:
    try:
        import helm_python
    except ImportError:  # a platform without a helm-python-sdk wheel (it is in the test extras)
        if os.environ.get("CI") == "true":
            pytest.fail("helm-python-sdk is not installed: pip install -e '.[test]'")
        pytest.skip("helm-python-sdk is not installed")
    return helm_python


def _render(helm: ModuleType, values: dict[str, Any] | None = None) -> dict[str, str]:
    with helm.Chart.load(str(CHART)) as chart:
        rendered: dict[str, str] = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE)
    return rendered


def _documents(rendered: dict[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    for template, text in sorted(rendered.items()):
        if template.endswith("NOTES.txt"):
            continue
        for document in yaml.safe_load_all(text):
            if document is not None:
                yield template, document


def _manifests(helm: ModuleType, values: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Rendered objects by kind (the chart makes at most one of each, the helm test Pod aside)."""
    found: dict[str, dict[str, Any]] = {}
    for template, document in _documents(_render(helm, values)):
        if "/templates/tests/" in template:
            continue
        assert document["kind"] not in found, f"two {document['kind']} objects"
        found[document["kind"]] = document
    return found


def _container(manifests: dict[str, dict[str, Any]]) -> dict[str, Any]:
    containers = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def _gateway_yaml(manifests: dict[str, dict[str, Any]]) -> str:
    text: str = manifests["ConfigMap"]["data"]["gateway.yaml"]
    return text


@pytest.mark.parametrize("path", [None, *CI_VALUES], ids=lambda p: p.name if p else "defaults")
def test_every_template_renders_to_yaml_with_the_expected_kinds(helm: ModuleType, path: Path | None) -> None:
    values = _load_yaml(path) if path else {}
    rendered = _render(helm, values)
    kinds: list[str] = []
    for template, document in _documents(rendered):
        assert isinstance(document, dict), template
        assert document.get("apiVersion") and document.get("kind"), template
        assert document["metadata"]["name"].startswith(FULLNAME), template
        assert len(document["metadata"]["name"]) <= 63, template
        labels = document["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        kinds.append(document["kind"])
    merged = _merge(DEFAULTS, values)
    expected = {"ConfigMap", "Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "Pod"}
    if merged["autoscaling"]["enabled"]:
        expected.add("HorizontalPodAutoscaler")
    if merged["serviceMonitor"]["enabled"]:
        expected.add("ServiceMonitor")
    if merged["ingress"]["enabled"]:
        expected.add("Ingress")
    if merged["networkPolicy"]["enabled"]:
        expected.add("NetworkPolicy")
    assert sorted(kinds) == sorted(expected)


def test_ingress_and_network_policy_are_off_by_default_and_point_at_the_gateway(helm: ModuleType) -> None:
    defaults = _manifests(helm)
    assert "Ingress" not in defaults and "NetworkPolicy" not in defaults
    manifests = _manifests(helm, _load_yaml(CHART / "ci" / "edge-values.yaml"))
    ingress = manifests["Ingress"]["spec"]
    service = manifests["Service"]
    assert ingress["ingressClassName"] == "nginx"
    assert ingress["tls"] == [{"secretName": "loopgate-tls", "hosts": ["loopgate.example.com"]}]
    (rule,) = ingress["rules"]
    (path,) = rule["http"]["paths"]
    assert rule["host"] == "loopgate.example.com" and path["path"] == "/" and path["pathType"] == "Prefix"
    assert path["backend"]["service"] == {"name": service["metadata"]["name"], "port": {"name": "http"}}
    assert "http" in {port["name"] for port in service["spec"]["ports"]}
    # Long streams must not be cut by the controller before the gateway's own deadline.
    assert manifests["Ingress"]["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "900"
    policy = manifests["NetworkPolicy"]["spec"]
    assert policy["podSelector"]["matchLabels"] == manifests["Deployment"]["spec"]["selector"]["matchLabels"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    (allowed,) = policy["ingress"]
    assert allowed["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert allowed["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}]
    dns, redis_rule, https = policy["egress"]
    assert {p["port"] for p in dns["ports"]} == {53} and "to" not in dns
    assert redis_rule["ports"] == [{"port": 6379, "protocol": "TCP"}] and https["ports"][0]["port"] == 443
    notes = _render(helm, _load_yaml(CHART / "ci" / "edge-values.yaml"))["loopgate/templates/NOTES.txt"]
    assert "through the Ingress at https://loopgate.example.com/v1" in notes
    assert "until the store answers at redis://redis-master:6379/0" in notes
    assert "Ingress" not in _render(helm)["loopgate/templates/NOTES.txt"]
    # Enabled with no egress rules: egress stays open (providers, the store, tools), only ingress is limited.
    open_egress = _manifests(helm, {"networkPolicy": {"enabled": True}})["NetworkPolicy"]["spec"]
    assert open_egress["policyTypes"] == ["Ingress"] and "egress" not in open_egress
    assert "from" not in open_egress["ingress"][0]


def test_deployment_probes_resources_and_graceful_shutdown(helm: ModuleType) -> None:
    manifests = _manifests(helm)
    pod = manifests["Deployment"]["spec"]["template"]["spec"]
    container = _container(manifests)
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert container["resources"]["requests"]["memory"] and container["resources"]["limits"]["memory"]
    assert "cpu" not in container["resources"]["limits"]
    # preStop sleeps, then the gateway drains for up to 30 s: the grace period must cover both.
    sleep = container["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] > int(sleep[1]) + 30
    # One worker per pod by default; the args reach `loopgate serve` (the image's entrypoint).
    args = container["args"]
    assert args[args.index("--workers") + 1] == "1"
    assert args[args.index("--config") + 1] == "/etc/loopgate/gateway.yaml"
    assert manifests["Deployment"]["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_pods_run_as_the_images_non_root_user_on_a_read_only_root(helm: ModuleType) -> None:
    manifests = _manifests(helm)
    pod = manifests["Deployment"]["spec"]["template"]["spec"]
    container = _container(manifests)
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    uid = int(re.search(r"useradd [^\n]*--uid (\d+)", dockerfile).group(1))  # type: ignore[union-attr]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == uid
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] == uid
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["tmp"]["mountPath"] == "/tmp" and "emptyDir" in volumes["tmp"]
    assert mounts["config"]["readOnly"] is True
    assert volumes["config"]["configMap"]["name"] == manifests["ConfigMap"]["metadata"]["name"]


def test_a_config_change_changes_the_checksum_that_rolls_the_pods(helm: ModuleType) -> None:
    def checksum(values: dict[str, Any]) -> str:
        rendered = _render(helm, values)
        deployment = yaml.safe_load(rendered["loopgate/templates/deployment.yaml"])
        annotation: str = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        # The hash of exactly what the ConfigMap holds.
        configmap = rendered["loopgate/templates/configmap.yaml"]
        assert annotation == hashlib.sha256(configmap.encode()).hexdigest()
        return annotation

    base = checksum({})
    assert checksum({"replicaCount": 5}) == base
    assert checksum({"config": {"routing": {"breaker_failures": 5}}}) != base
    assert checksum({"store": {"url": "redis://other:6379/0"}}) != base


def test_provider_and_api_keys_come_from_the_existing_secret(helm: ModuleType) -> None:
    manifests = _manifests(helm)
    env = {e["name"]: e for e in _container(manifests)["env"]}
    for entry in DEFAULTS["secretEnv"]:
        ref = env[entry["name"]]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == DEFAULTS["existingSecret"]
        assert ref["key"] == entry["key"]
        assert ref.get("optional", False) == entry.get("optional", False)
    # No secret value is in the ConfigMap, and every ${VAR} the config needs is set on the container.
    config = _gateway_yaml(manifests)
    for name, default in _VAR.findall(config):
        assert name in env, f"${{{name}}} is used by the config but not set on the container"
        if not default:
            assert "valueFrom" in env[name], name
    assert "LOOPGATE_API_KEY" in env and "optional" not in env["LOOPGATE_API_KEY"]["valueFrom"]["secretKeyRef"]


def _load_rendered_config(manifests: dict[str, dict[str, Any]], tls_dir: Path) -> Any:
    """Run the gateway's loader on the rendered file with the environment the pod would have.

    The loader checks that ``store.tls`` files exist: the Secret the chart mounts is stood in for by
    files at the same names under ``tls_dir``, so the mount path itself is checked against the volume.
    """
    env = {e["name"]: f"value-of-{e['name'].lower()}" for e in _container(manifests)["env"] if "valueFrom" in e}
    if "LOOPGATE_STORE_URL" in env:
        env["LOOPGATE_STORE_URL"] = "redis://:secret@redis-0.redis:6379/0"
    text = _gateway_yaml(manifests)
    mounts = {m["mountPath"] for m in _container(manifests).get("volumeMounts", [])}
    if TLS_MOUNT in text:
        assert TLS_MOUNT in mounts, "store.tls files point at a path no volume is mounted on"
        for name in ("ca.crt", "tls.crt", "tls.key"):
            (tls_dir / name).write_text("stand-in for the mounted Secret\n")
        text = text.replace(TLS_MOUNT, str(tls_dir))
    return parse_config(text, env, "gateway.yaml")


@pytest.mark.parametrize("path", [None, *CI_VALUES], ids=lambda p: p.name if p else "defaults")
def test_the_rendered_gateway_config_loads(helm: ModuleType, path: Path | None, tmp_path: Path) -> None:
    manifests = _manifests(helm, _load_yaml(path) if path else {})
    config = _load_rendered_config(manifests, tmp_path)
    assert config.server.host == "0.0.0.0"
    assert config.server.port == _container(manifests)["ports"][0]["containerPort"]
    assert config.store.kind == "redis"
    assert config.auth.enabled


def test_autoscaling_owns_the_replica_count_when_enabled(helm: ModuleType) -> None:
    plain = _manifests(helm)
    assert plain["Deployment"]["spec"]["replicas"] == DEFAULTS["replicaCount"]
    assert "HorizontalPodAutoscaler" not in plain
    scaled = _manifests(helm, _load_yaml(CHART / "ci" / "hpa-values.yaml"))
    hpa = scaled["HorizontalPodAutoscaler"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": scaled["Deployment"]["metadata"]["name"]}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 20)
    assert hpa["spec"]["metrics"] == [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}}]
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300
    assert "replicas" not in scaled["Deployment"]["spec"]


def test_service_pdb_monitor_and_spread_select_the_gateway_pods(helm: ModuleType) -> None:
    manifests = _manifests(helm, _load_yaml(CHART / "ci" / "hpa-values.yaml"))
    pod_labels = manifests["Deployment"]["spec"]["template"]["metadata"]["labels"]
    selector = manifests["Deployment"]["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    assert manifests["Service"]["spec"]["selector"] == selector
    assert manifests["Service"]["spec"]["ports"][0]["targetPort"] == "http"
    assert manifests["PodDisruptionBudget"]["spec"] == {"minAvailable": 2, "selector": {"matchLabels": selector}}
    monitor = manifests["ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= manifests["Service"]["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == manifests["Service"]["spec"]["ports"][0]["name"]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    spread = manifests["Deployment"]["spec"]["template"]["spec"]["topologySpreadConstraints"]
    by_key = {c["topologyKey"]: c for c in spread}
    assert set(by_key) == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    assert by_key["topology.kubernetes.io/zone"]["whenUnsatisfiable"] == "DoNotSchedule"
    for constraint in spread:
        assert constraint["labelSelector"]["matchLabels"] == selector


def test_defaults_keep_the_pdb_drainable_and_the_monitor_off(helm: ModuleType) -> None:
    manifests = _manifests(helm)
    assert manifests["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in manifests["PodDisruptionBudget"]["spec"]
    assert "ServiceMonitor" not in manifests
    off = _manifests(helm, {"topologySpread": {"zone": {"enabled": False}}, "podDisruptionBudget": {"enabled": False}})
    spread = off["Deployment"]["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in spread] == ["kubernetes.io/hostname"]
    assert "PodDisruptionBudget" not in off


def test_store_modes_render_the_gateway_store_section(helm: ModuleType) -> None:
    cluster = _manifests(helm, _load_yaml(CHART / "ci" / "cluster-values.yaml"))
    store = yaml.safe_load(_gateway_yaml(cluster))["store"]
    assert store == {"url": "${LOOPGATE_STORE_URL}", "cluster": True, "wait_replicas": 1, "continuation_ttl_s": 86400}
    env = {e["name"]: e for e in _container(cluster)["env"]}
    assert env["LOOPGATE_STORE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "loopgate", "key": "redis-url"}

    sentinel = yaml.safe_load(_gateway_yaml(_manifests(helm, _load_yaml(CHART / "ci" / "sentinel-values.yaml"))))
    assert sentinel["store"]["sentinel"]["master"] == "mymaster"
    assert len(sentinel["store"]["sentinel"]["nodes"]) == 3
    assert "cluster" not in sentinel["store"]

    tls = _manifests(helm, _load_yaml(CHART / "ci" / "tls-values.yaml"))
    files = yaml.safe_load(_gateway_yaml(tls))["store"]["tls"]
    pod = tls["Deployment"]["spec"]["template"]["spec"]
    mount = next(m for m in _container(tls)["volumeMounts"] if m["name"] == "redis-tls")
    volume = next(v for v in pod["volumes"] if v["name"] == "redis-tls")
    assert volume["secret"]["secretName"] == "loopgate-redis-tls"
    assert mount["readOnly"] is True
    assert files == {f"{kind}_file": f"{mount['mountPath']}/{key}"
                     for kind, key in (("ca", "ca.crt"), ("cert", "tls.crt"), ("key", "tls.key"))}
    ca_only = yaml.safe_load(_gateway_yaml(_manifests(helm, {"store": {"url": "rediss://r:6380/0", "tls": {
        "enabled": True, "secretName": "ca", "certKey": "", "keyKey": ""}}})))
    assert ca_only["store"]["tls"] == {"ca_file": "/etc/loopgate/redis-tls/ca.crt"}


def test_store_deadlines_quota_and_hostname_check_pass_through_only_when_set(helm: ModuleType,
                                                                             tmp_path: Path) -> None:
    defaults = yaml.safe_load(_gateway_yaml(_manifests(helm, {})))["store"]
    assert not {"timeout_ms", "fail_open_ms", "wait_timeout_ms", "tenant_max_stored_bytes"} & defaults.keys()
    values = {"store": {"url": "rediss://r:6380/0", "timeout_ms": 2500, "fail_open_ms": 50, "wait_timeout_ms": 900,
                        "tenant_max_stored_bytes": 0,
                        "tls": {"enabled": True, "secretName": "t", "checkHostname": False}}}
    assert _schema_errors(_merge(DEFAULTS, values)) == []
    manifests = _manifests(helm, values)
    store = yaml.safe_load(_gateway_yaml(manifests))["store"]
    assert (store["timeout_ms"], store["fail_open_ms"], store["wait_timeout_ms"]) == (2500, 50, 900)
    assert store["tenant_max_stored_bytes"] == 0  # zero (no quota) is a setting, not "unset"
    assert store["tls"]["check_hostname"] is False
    config = _load_rendered_config(manifests, tmp_path)
    assert (config.store.timeout_ms, config.store.fail_open_ms, config.store.tenant_max_stored_bytes) == (2500, 50, 0)
    assert config.store.tls is not None and config.store.tls.check_hostname is False


@pytest.mark.parametrize(("values", "message"), [
    ({"preStopSleepSeconds": 20, "terminationGracePeriodSeconds": 45}, "terminationGracePeriodSeconds must exceed"),
    ({"existingSecret": ""}, "secretEnv names keys of existingSecret"),
    ({"store": {"url": ""}}, "store.url (or store.urlSecretKey) is required"),
    ({"existingSecret": "", "secretEnv": [], "store": {"urlSecretKey": "u"}},
     "store.urlSecretKey needs existingSecret"),
    ({"store": {"sentinel": {"master": "m", "nodes": []}}}, "store.sentinel.nodes needs at least one"),
    ({"store": {"sentinel": {"master": "", "nodes": ["s:26379"]}}}, "store.sentinel.master is required"),
    ({"store": {"cluster": True, "sentinel": {"master": "m", "nodes": ["s:26379"]}}}, "are exclusive"),
    ({"store": {"tls": {"enabled": True}}}, "store.tls.secretName is required"),
    ({"store": {"tls": {"enabled": True, "secretName": "t", "keyKey": ""}}}, "go together"),
    ({"store": {"fail_open_ms": 1500}}, "store.fail_open_ms must not exceed store.timeout_ms"),
    ({"store": {"timeout_ms": 200, "fail_open_ms": 300}}, "store.fail_open_ms must not exceed store.timeout_ms"),
    ({"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}}, "must not exceed"),
])
def test_the_chart_refuses_inconsistent_values(helm: ModuleType, values: dict[str, Any], message: str) -> None:
    assert _schema_errors(_merge(DEFAULTS, values)) == []  # each is a cross-field rule the schema cannot state
    with pytest.raises(helm.HelmError) as caught:
        _render(helm, values)
    assert message in str(caught.value)


@pytest.mark.parametrize("path", [None, *CI_VALUES], ids=lambda p: p.name if p else "defaults")
def test_helm_lint_finds_no_warning(helm: ModuleType, path: Path | None) -> None:
    report = helm.lint(str(CHART), _load_yaml(path) if path else None, strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_helm_lint_reports_schema_violations(helm: ModuleType) -> None:
    report = helm.lint(str(CHART), {"replicaCount": 0}, strict=True)
    assert any("replicaCount" in error for error in report["errors"])


@pytest.mark.skipif(shutil.which("helm") is None, reason="no helm binary on PATH (the Helm engine above still ran)")
@pytest.mark.parametrize("path", [None, *CI_VALUES], ids=lambda p: p.name if p else "defaults")
def test_helm_binary_lints_and_templates(path: Path | None) -> None:
    files = ["--values", str(path)] if path else []
    subprocess.run(["helm", "lint", "--strict", str(CHART), *files], check=True, capture_output=True, timeout=120)
    out = subprocess.run(["helm", "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *files], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    kinds = [d["kind"] for d in yaml.safe_load_all(out) if d]
    assert {"Deployment", "Service", "ConfigMap"} <= set(kinds)


# --- the rendered pod, run as a real gateway process ----------------------------------------------


@contextmanager
def _run_pod(manifests: dict[str, dict[str, Any]], store_url: str, tmp: Path) -> Iterator[tuple[str, Popen[bytes]]]:
    """``loopgate serve`` with the container's args, env and rendered config (loopback, a free port, a test store)."""
    container = _container(manifests)
    config = yaml.safe_load(_gateway_yaml(manifests))
    port = free_port()
    config["server"].update(host="127.0.0.1", port=port)
    config["store"]["url"] = store_url
    path = tmp / "gateway.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    args = list(container["args"])
    args[args.index("--config") + 1] = str(path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for entry in container["env"]:
        env[entry["name"]] = entry.get("value", f"value-of-{entry['name'].lower()}")
    env["LOOPGATE_CONFIG"] = str(path)
    url = f"http://127.0.0.1:{port}"
    with (tmp / "gateway.log").open("wb") as log:
        process = Popen([sys.executable, "-m", "gateway", "serve", *args], cwd=ROOT, env=env, stdout=log,
                        stderr=STDOUT)
        try:
            deadline = time.monotonic() + 30
            while True:
                assert process.poll() is None, (tmp / "gateway.log").read_text(errors="replace")
                try:
                    if httpx.get(url + container["startupProbe"]["httpGet"]["path"], timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the startup probe never passed"
                time.sleep(0.05)
            yield url, process
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)


@pytest.mark.slow
def test_the_rendered_pod_serves_its_probes_and_drains_on_sigterm(helm: ModuleType, tmp_path: Path) -> None:
    client = redis.Redis.from_url(TEST_REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Redis not reachable at {TEST_REDIS_URL}")
        pytest.skip(f"Redis not reachable at {TEST_REDIS_URL}")
    finally:
        client.close()
    manifests = _manifests(helm)
    container = _container(manifests)
    with _run_pod(manifests, TEST_REDIS_URL, tmp_path) as (url, process):
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert httpx.get(url + container[probe]["httpGet"]["path"], timeout=5).status_code == 200, probe
        assert httpx.get(f"{url}/metrics", timeout=5).status_code == 200
        assert httpx.get(f"{url}/v1/models", timeout=5).status_code == 401
        key = {"Authorization": "Bearer value-of-loopgate_api_key"}
        models = httpx.get(f"{url}/v1/models", headers=key, timeout=5).json()
        assert {m["id"] for m in models["data"]} == {"smart", "fast"}
        # SIGTERM comes after the preStop sleep: the process must be gone within what is left of the grace period.
        pod = manifests["Deployment"]["spec"]["template"]["spec"]
        left = pod["terminationGracePeriodSeconds"] - int(container["lifecycle"]["preStop"]["exec"]["command"][1])
        process.send_signal(signal.SIGTERM)
        # uvicorn re-raises the signal once its graceful shutdown is done (exit 143 in a container).
        try:
            code = process.wait(left)
        except subprocess.TimeoutExpired:
            log_tail = (tmp_path / "gateway.log").read_text(errors="replace")[-4000:]
            pytest.fail(f"the gateway was still running {left} s after SIGTERM; its log ends:\n{log_tail}")
        assert code in (0, -signal.SIGTERM)
    assert "Application shutdown complete" in (tmp_path / "gateway.log").read_text(errors="replace")


@pytest.mark.slow
def test_a_pod_whose_store_is_unreachable_is_live_but_not_ready(helm: ModuleType, tmp_path: Path) -> None:
    manifests = _manifests(helm)
    container = _container(manifests)
    missing = f"redis://127.0.0.1:{free_port()}/0"
    with _run_pod(manifests, missing, tmp_path) as (url, _):
        assert httpx.get(url + container["livenessProbe"]["httpGet"]["path"], timeout=10).status_code == 200
        assert httpx.get(url + container["readinessProbe"]["httpGet"]["path"], timeout=10).status_code == 503
        log = (tmp_path / "gateway.log").read_text(errors="replace")
        # One clear line at start-up says why the pod stays unready, and where it looked.
        (line,) = [line for line in log.splitlines() if "store is not usable at start-up" in line]
        assert "127.0.0.1" in line and "/readyz answers 503 until it is" in line, line
        assert "Traceback" not in log
