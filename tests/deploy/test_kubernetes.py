"""deploy/kubernetes against the agent: the config loads with the agent's own parsers, ports,
probes, volume and flags are the ones the agent uses, and a real agent answers the probes."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

from agent.cli_score import check_other_tables
from agent.config import load_config
from agent.daemon_config import AgentSettings, env_names, env_typos, resolve
from carbonspan.cli import build_parser

from .conftest import K8S, REPO, Kit

EXPECTED = {  # file -> (apiVersion, kind) of each document, in order
    "00-namespace.yaml": [("v1", "Namespace")],
    "configmap.yaml": [("v1", "ConfigMap")],
    "services.yaml": [("v1", "Service"), ("v1", "Service")],
    "statefulset.yaml": [("apps/v1", "StatefulSet")],
}
POD = "carbonspan-0"  # what the downward API gives the first pod


def settings(kit: Kit, tmp_path: Path, extra_env: dict[str, str] | None = None) -> AgentSettings:
    """The agent's settings in pod carbonspan-0: the ConfigMap file, the container's env
    (downward API resolved) and its command-line flags parsed by the real CLI parser."""
    c = kit.container
    assert c["command"] == ["carbonspan"]
    args = build_parser(only="agent").parse_args(c["args"])
    assert args.command == "agent"
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    (config_volume,) = [v for v in kit.statefulset["spec"]["template"]["spec"]["volumes"]
                        if v["name"] == "config"]
    assert config_volume["configMap"]["name"] == kit.of_kind("ConfigMap")[0]["metadata"]["name"]
    assert str(args.config) == f"{mounts['config']['mountPath']}/carbonspan.toml"
    path = tmp_path / "carbonspan.toml"
    path.write_text(kit.toml_text)
    cfg = load_config(path)
    check_other_tables(cfg)  # what `carbonspan score` does with [agent] and [sources]
    env = {}
    for var in c.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            assert var["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}, var
            env[var["name"]] = POD
    env.update(extra_env or {})
    return resolve(cfg.sections.get("agent"), env, {
        "archive_dir": args.archive_dir, "agent_id": args.agent_id, "bind": args.bind,
        "grpc_port": args.grpc_port, "http_port": args.http_port,
        "window_seconds": args.window_seconds, "max_window_spans": args.max_window_spans})


def test_every_document_parses_with_the_expected_kind(kit: Kit) -> None:
    got = {name: [(d["apiVersion"], d["kind"]) for d in docs] for name, docs in kit.files.items()}
    assert got == EXPECTED
    (ns,) = kit.of_kind("Namespace")
    for doc in kit.all():
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == ns["metadata"]["name"], doc["metadata"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == "carbonspan"


def test_the_configmap_loads_with_the_agents_own_parsers(kit: Kit, tmp_path: Path) -> None:
    s = settings(kit, tmp_path)
    assert s.agent_id == POD  # one chain per pod, named after it
    assert env_typos({v["name"]: "x" for v in kit.container["env"]}) == []
    assert s.bind not in ("127.0.0.1", "localhost", "::1")  # reachable through the Services
    assert "[sources" not in kit.toml_text.replace("# [sources", "")  # an example only


def test_ports_probes_and_scrape_annotations_are_the_agents(kit: Kit, tmp_path: Path) -> None:
    s = settings(kit, tmp_path)
    c = kit.container
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"otlp-grpc": s.grpc_port, "otlp-http": s.http_port}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert kit.container_port(c[probe]["httpGet"]["port"]) == s.http_port, probe
        assert c[probe]["httpGet"].get("scheme", "HTTP") == ("HTTPS" if s.tls.enabled else "HTTP")
    notes = kit.statefulset["spec"]["template"]["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true"
    assert int(notes["prometheus.io/port"]) == s.http_port
    assert notes["prometheus.io/path"] == "/metrics"
    for svc in kit.of_kind("Service"):
        assert svc["spec"]["selector"] == kit.statefulset["spec"]["selector"]["matchLabels"]
        by_name = {p["name"]: p for p in svc["spec"]["ports"]}
        assert set(by_name) == {"otlp-grpc", "otlp-http"}
        assert kit.container_port(by_name["otlp-grpc"]["targetPort"]) == s.grpc_port
        assert kit.container_port(by_name["otlp-http"]["targetPort"]) == s.http_port
    assert kit.get("Service", kit.statefulset["spec"]["serviceName"])["spec"]["clusterIP"] == "None"


def test_one_durable_chain_per_pod(kit: Kit, tmp_path: Path) -> None:
    s = settings(kit, tmp_path)
    spec = kit.statefulset["spec"]
    (claim,) = spec["volumeClaimTemplates"]
    mounts = {m["name"]: m for m in kit.container["volumeMounts"]}
    assert Path(mounts[claim["metadata"]["name"]]["mountPath"]) == s.archive.dir
    assert not mounts[claim["metadata"]["name"]].get("readOnly", False)
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain",
                                                            "whenScaled": "Retain"}
    # the pod name is the agent id, hence the chain directory <archive dir>/<pod name>/
    assert {"name": "CARBONSPAN_AGENT_ID",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in kit.container["env"]


def test_stop_and_security_settings(kit: Kit, tmp_path: Path) -> None:
    s = settings(kit, tmp_path)
    pod = kit.statefulset["spec"]["template"]["spec"]
    # the drain is bounded by shutdown_timeout_s; then the open window is archived and fsynced
    assert pod["terminationGracePeriodSeconds"] >= s.shutdown_timeout_s + 15
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
    sc = kit.container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    res = kit.container["resources"]
    assert set(res["requests"]) == {"cpu", "memory"} and set(res["limits"]) == {"cpu", "memory"}


def link_variables(service: dict) -> dict[str, str]:
    """The variables Kubernetes' service links would inject for ``service`` (docker-link style)."""
    if service["spec"].get("clusterIP") == "None":
        return {}
    prefix = re.sub(r"[^A-Z0-9]", "_", service["metadata"]["name"].upper())
    ports = service["spec"]["ports"]
    out = {f"{prefix}_SERVICE_HOST": "10.0.0.1", f"{prefix}_SERVICE_PORT": str(ports[0]["port"]),
           f"{prefix}_PORT": f"tcp://10.0.0.1:{ports[0]['port']}"}
    for p in ports:
        name = re.sub(r"[^A-Z0-9]", "_", p["name"].upper())
        out[f"{prefix}_SERVICE_PORT_{name}"] = str(p["port"])
        base = f"{prefix}_PORT_{p['port']}_TCP"
        out |= {base: f"tcp://10.0.0.1:{p['port']}", f"{base}_PROTO": "tcp",
                f"{base}_PORT": str(p["port"]), f"{base}_ADDR": "10.0.0.1"}
    return out


def test_service_link_variables_cannot_set_the_agent(kit: Kit, tmp_path: Path) -> None:
    """Service links share the CARBONSPAN_ prefix: a Service named carbonspan-http would inject
    CARBONSPAN_HTTP_PORT=tcp://... and stop the agent. They are off, and harmless if enabled."""
    assert kit.statefulset["spec"]["template"]["spec"]["enableServiceLinks"] is False
    links: dict[str, str] = {}
    for svc in kit.of_kind("Service"):
        links |= link_variables(svc)
    assert links and not set(links) & set(env_names())
    # the agent at most warns about a near miss (CARBONSPAN_OTLP_PORT); its settings are the same
    assert settings(kit, tmp_path, links) == settings(kit, tmp_path)


def test_a_real_agent_with_this_config_answers_the_probes(kit: Kit, live) -> None:
    c = kit.container
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        url = f"{live.agent.http_url}{c[probe]['httpGet']['path']}"
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert resp.status == 200, (probe, url)
    assert live.agent.startup_line.startswith(f"carbonspan agent {live.agent.agent_id}: ")


def _fake_kubectl(tmp_path: Path, root: Path, running: str, claims: list[str]) -> Path:
    """A kubectl stand-in: `get pods` lists ``running``, `get pvc` lists ``claims``, and
    `exec POD -c agent -- tar ...` runs that tar here with the pod's mount path mapped to
    ``root``. Every call is logged."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "kubectl"
    script.write_text(f"""#!{sys.executable}
import os, subprocess, sys
args = sys.argv[1:]
with open({str(tmp_path / "calls.log")!r}, "a") as log:
    log.write(" ".join(args) + "\\n")
if "get" in args and "pods" in args:
    print({running!r})
elif "get" in args and "pvc" in args:
    print({" ".join(claims)!r})
elif "exec" in args:
    cmd = args[args.index("--") + 1:]
    cmd = [a.replace("/var/lib/carbonspan", {str(root)!r}) for a in cmd]
    sys.exit(subprocess.call(cmd))
else:
    sys.exit("unexpected kubectl call: " + " ".join(args))
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def test_copy_archives_gives_the_auditor_a_chain_that_verifies(kit: Kit, live, tmp_path) -> None:
    script = K8S / "copy-archives.sh"
    text = script.read_text()
    mounts = {m["name"]: m["mountPath"] for m in kit.container["volumeMounts"]}
    assert f"root={mounts['archive']} " in text
    selector = ",".join(f"{k}={v}" for k, v in
                        kit.statefulset["spec"]["selector"]["matchLabels"].items())
    assert f"selector={selector}\n" in text
    (claim,) = kit.statefulset["spec"]["volumeClaimTemplates"]
    assert "${claim#" + claim["metadata"]["name"] + "-}" in text
    assert "-c " + kit.container["name"] + " " in text
    assert f"ns=${{NAMESPACE:-{kit.of_kind('Namespace')[0]['metadata']['name']}}}" in text

    agent = live.agent  # still running: the copy is taken from a live agent
    bin_dir = _fake_kubectl(tmp_path, agent.root, agent.agent_id,
                            [f"archive-{agent.agent_id}", "archive-carbonspan-7"])
    dest = tmp_path / "copied"
    run = subprocess.run(["bash", str(script), str(dest)], capture_output=True, text=True,
                         timeout=30, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert run.returncode == 0, run.stderr
    assert "not copied: volume archive-carbonspan-7" in run.stderr
    copied = sorted(p.name for p in (dest / agent.agent_id).iterdir())
    assert copied and all(n.startswith("windows-") for n in copied), copied
    verify = subprocess.run([sys.executable, "-m", "carbonspan", "verify", str(dest)], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0, verify.stdout + verify.stderr
