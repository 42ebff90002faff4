"""The Kubernetes manifests (deploy/kubernetes/, docs/deployment.md, "Kubernetes"), checked
against the Kubernetes API schemas that the ``kubernetes-validate`` package ships (strict: an
unknown field is an error; no network), against the ``aap`` command line, and against the
configuration loader: what they start is what this release serves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from aap.config.environment import environment_problems
from aap.config.loader import load_settings
from aap.paths import LIVEZ_PATH, READYZ_PATH
from test_deploy_artifacts import accepts

ROOT = Path(__file__).resolve().parent.parent
KUBERNETES = ROOT / "deploy" / "kubernetes"
#: The oldest Kubernetes the manifests are written for (every field they use is GA there), and
#: the newest whose schemas the package ships.
VERSIONS = ("1.29", kubernetes_validate.latest_version())


def manifests() -> dict[str, dict[str, Any]]:
    """Every object of the kustomization's resources, by ``Kind/name``."""
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    objects: dict[str, dict[str, Any]] = {}
    for resource in kustomization["resources"]:
        for document in yaml.safe_load_all((KUBERNETES / resource).read_text()):
            objects[f"{document['kind']}/{document['metadata']['name']}"] = document
    return objects


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


def test_the_kustomization_lists_every_manifest_and_nothing_else():
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    files = {p.name for p in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)
    assert [image["name"] for image in kustomization["images"]] == ["aap"]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_against_the_kubernetes_schemas(version):
    objects = manifests()
    assert set(objects) == {
        "ConfigMap/aap-config",
        "Secret/aap-secrets",
        "Job/aap-db-upgrade",
        "Deployment/aap-web",
        "Service/aap",
        "PodDisruptionBudget/aap-web",
        "Deployment/aap-deliver",
        "Deployment/aap-feeds",
    }
    for name, obj in objects.items():
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            raise AssertionError(f"{name}: {error.message} at {list(error.path)}") from None


def test_a_broken_manifest_is_caught():
    """The check can fail: an unknown field and a wrong type are both refused."""
    web = manifests()["Deployment/aap-web"]
    pod_spec(web)["containers"][0]["livenessProbe"]["httpGet"]["paht"] = "/livez"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(web, VERSIONS[0], strict=True)
    service = manifests()["Service/aap"]
    service["spec"]["ports"][0]["port"] = "eighty"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(service, VERSIONS[0], strict=True)


def test_the_web_pods_are_probed_for_liveness_and_readiness_and_sized():
    objects = manifests()
    web = objects["Deployment/aap-web"]
    (container,) = pod_spec(web)["containers"]
    port = {p["name"]: p["containerPort"] for p in container["ports"]}["http"]
    assert container["args"][container["args"].index("--port") + 1] == str(port)
    assert container["livenessProbe"]["httpGet"] == {"path": LIVEZ_PATH, "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": LIVEZ_PATH, "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": READYZ_PATH, "port": "http"}
    # /readyz answers within its own 5 s bound (docs/deployment.md): the probe waits longer.
    assert container["readinessProbe"]["timeoutSeconds"] > 5
    requests = container["resources"]["requests"]
    assert set(requests) == {"cpu", "memory"} and "memory" in container["resources"]["limits"]
    labels = web["spec"]["template"]["metadata"]["labels"]
    assert web["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for other in ("Service/aap", "PodDisruptionBudget/aap-web"):
        spec = objects[other]["spec"]
        selector = spec["selector"].get("matchLabels", spec["selector"])
        assert selector.items() <= labels.items(), other
    assert objects["Service/aap"]["spec"]["ports"][0]["targetPort"] == "http"
    assert objects["PodDisruptionBudget/aap-web"]["spec"]["minAvailable"] < web["spec"]["replicas"]


def test_each_process_runs_a_command_the_cli_accepts_with_the_configuration_and_secrets():
    objects = manifests()
    commands = {}
    for name, obj in objects.items():
        if obj["kind"] not in ("Deployment", "Job"):
            continue
        spec = pod_spec(obj)
        (container,) = spec["containers"]
        assert container["image"] == "aap"
        accepts(container["args"])
        commands[name] = container["args"][:2]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["AAP_CONFIG"] == "/etc/aap/aap.toml"
        assert container["envFrom"] == [{"secretRef": {"name": "aap-secrets"}}]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["config"] == "/etc/aap"
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["config"]["configMap"]["name"] == "aap-config"
        assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["runAsUser"] == 10001
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert commands == {
        "Job/aap-db-upgrade": ["db", "upgrade"],
        "Deployment/aap-web": ["serve", "--host"],
        "Deployment/aap-deliver": ["deliver"],
        "Deployment/aap-feeds": ["feeds", "run"],
    }


def test_the_configuration_file_passes_the_start_up_check_with_the_secrets(tmp_path):
    objects = manifests()
    config = tmp_path / "aap.toml"
    config.write_text(objects["ConfigMap/aap-config"]["data"]["aap.toml"])
    environ = dict(objects["Secret/aap-secrets"]["stringData"])
    settings = load_settings(str(config), environ=environ)
    assert environment_problems(settings, environ) == []
    assert settings.database_url == environ["AAP_DATABASE_URL"]
    assert settings.leads.delivery.in_process is False  # the aap-deliver Deployment sends the leads
    assert settings.public_url.startswith("https://")
