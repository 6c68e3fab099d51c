"""Offline checks of the rendered Kubernetes manifests.

    check.py RENDERED.yaml TEMPLATE.yaml...

Every object validates (strictly: no unknown field) against the Kubernetes schemas that
kubernetes-validate ships, for each version in KUBERNETES_VERSIONS; every pod template passes
the Pod Security "restricted" profile; and the settings that must agree do (the drain and the
readiness probe, the termination grace, the image, the CPU resources, the NetworkPolicy's
ports). Exits 1 naming every problem.
"""

import sys
import tomllib

import kubernetes_validate
import yaml

# The oldest Kubernetes release still maintained upstream, and the newest one the package knows.
KUBERNETES_VERSIONS = ["1.32.0", "1.37.0"]
# Pod Security "restricted": the capabilities a container may add back.
RESTRICTED_ADD = {"NET_BIND_SERVICE"}
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
    "persistentVolumeClaim", "projected", "secret",
}

problems = []


def problem(where, text):
    problems.append(f"{where}: {text}")


def name_of(obj):
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


def restricted(where, pod):
    """The checks of the Pod Security Standards' baseline and restricted profiles that a pod
    template can fail."""
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            problem(where, f"{key} is not allowed")
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            problem(where, f"volume {volume.get('name')}: {sorted(kinds)} is not allowed")
    pod_context = pod.get("securityContext", {})
    pod_seccomp = pod_context.get("seccompProfile", {}).get("type")
    containers = pod.get("containers", []) + pod.get("initContainers", [])
    if not containers:
        problem(where, "no containers")
    for container in containers:
        at = f"{where} container {container.get('name')}"
        context = container.get("securityContext", {})
        if context.get("privileged"):
            problem(at, "privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            problem(at, "allowPrivilegeEscalation must be false")
        caps = context.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            problem(at, "capabilities must drop ALL")
        if not set(caps.get("add", [])) <= RESTRICTED_ADD:
            problem(at, f"capabilities.add {caps.get('add')} is not allowed")
        if not context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
            problem(at, "runAsNonRoot must be true (pod or container)")
        if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
            problem(at, "runAsUser 0")
        seccomp = context.get("seccompProfile", {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problem(at, f"seccompProfile must be RuntimeDefault or Localhost, got {seccomp}")
        if not context.get("readOnlyRootFilesystem"):
            problem(at, "readOnlyRootFilesystem must be true (this project's rule)")
        for port in container.get("ports", []):
            if port.get("hostPort"):
                problem(at, "hostPort is not allowed")


def deployment(obj, config_maps):
    where = name_of(obj)
    spec = obj["spec"]
    pod = spec["template"]["spec"]
    restricted(where, pod)
    if "replicas" in spec:
        problem(where, "replicas belongs to the HorizontalPodAutoscaler")
    if not pod.get("topologySpreadConstraints"):
        problem(where, "no topologySpreadConstraints")
    elif not any(c.get("topologyKey") == "kubernetes.io/hostname"
                 for c in pod["topologySpreadConstraints"]):
        problem(where, "replicas are not spread across nodes (kubernetes.io/hostname)")
    container = pod["containers"][0]
    if container.get("imagePullPolicy") != "IfNotPresent":
        problem(where, "imagePullPolicy must be IfNotPresent")
    image = container.get("image", "")
    if "/" not in image or ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest"):
        problem(where, f"image {image!r} must name a registry and a tag (kustomization images:)")
    resources = container.get("resources", {})
    for part in ("requests", "limits"):
        if "cpu" not in resources.get(part, {}):
            problem(where, f"no CPU {part}")
    # The configuration the pod mounts.
    mounted = [v["configMap"]["name"] for v in pod.get("volumes", []) if "configMap" in v]
    config = None
    for name in mounted:
        data = config_maps.get(name, {}).get("releasegate.toml")
        if data is not None:
            config = tomllib.loads(data)
    if config is None:
        problem(where, "mounts no ConfigMap with releasegate.toml")
        return
    server = config.get("server", {})
    probe = container.get("readinessProbe", {})
    period = probe.get("periodSeconds", 10)
    failures = probe.get("failureThreshold", 3)
    drain = server.get("drain_delay_ms", 0)
    if drain != period * failures * 1000:
        problem(where, f"drain_delay_ms {drain} is not periodSeconds × failureThreshold "
                       f"of the readiness probe ({period} s × {failures})")
    grace = server.get("shutdown_grace_ms", 10000)
    # The admin listener gets one more second once the public one has drained.
    needed = drain + grace + 1000
    termination = pod.get("terminationGracePeriodSeconds", 30) * 1000
    if termination <= needed:
        problem(where, f"terminationGracePeriodSeconds ({termination} ms) must exceed "
                       f"drain_delay_ms + shutdown_grace_ms + 1 s ({needed} ms)")
    if config.get("recipients"):
        problem(where, "the shipped configuration must carry no recipient (no known key)")
    admin_port = int(server.get("admin_listen", "127.0.0.1:9090").rsplit(":", 1)[1])
    public_port = int(server.get("listen", "127.0.0.1:8080").rsplit(":", 1)[1])
    return public_port, admin_port


def network_policy(obj, ports):
    where = name_of(obj)
    public, admin = ports
    seen = {}
    for rule in obj["spec"].get("ingress", []):
        rule_ports = [p.get("port") for p in rule.get("ports", [])]
        if not rule_ports or not rule.get("from"):
            problem(where, "an ingress rule open to every port or every peer")
            continue
        for peer in rule["from"]:
            if "ipBlock" in peer or "namespaceSelector" not in peer:
                problem(where, "peers are namespaces only")
        for port in rule_ports:
            seen.setdefault(port, []).append(rule)
    if admin not in seen or public not in seen:
        problem(where, f"no rule for the public ({public}) or admin ({admin}) port")
    for rule in seen.get(admin, []):
        if any(p.get("port") == public for p in rule["ports"]):
            problem(where, "the admin port shares a rule with the public port")
        text = yaml.safe_dump(rule["from"])
        if "monitoring" not in text:
            problem(where, "the admin port is open beyond the monitoring namespace")


def main(rendered, templates):
    with open(rendered) as f:
        objects = [o for o in yaml.safe_load_all(f) if o]
    for path in templates:
        with open(path) as f:
            objects += [o for o in yaml.safe_load_all(f) if o]
    kinds = {}
    for obj in objects:
        kinds.setdefault(obj["kind"], []).append(obj)
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                problem(name_of(obj), f"Kubernetes {version}: {error.message} at "
                                      f"{'/'.join(str(p) for p in error.path)}")
            except kubernetes_validate.SchemaNotFoundError:
                problem(name_of(obj), f"Kubernetes {version} has no such kind")
        if obj["kind"] != "Namespace" and obj["metadata"].get("namespace") != "releasegate":
            problem(name_of(obj), "not in the releasegate namespace")
    for needed in ("Namespace", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget",
                   "HorizontalPodAutoscaler", "NetworkPolicy", "Secret"):
        if needed not in kinds:
            problem("manifests", f"no {needed}")
    for secret in kinds.get("Secret", []):
        values = {**secret.get("stringData", {}), **secret.get("data", {})}
        if any(values.values()):
            problem(name_of(secret), "a template Secret holds no value")
    config_maps = {c["metadata"]["name"]: c.get("data", {}) for c in kinds.get("ConfigMap", [])}
    ports = None
    for obj in kinds.get("Deployment", []):
        ports = deployment(obj, config_maps) or ports
    if ports:
        for obj in kinds.get("NetworkPolicy", []):
            network_policy(obj, ports)
    for namespace in kinds.get("Namespace", []):
        labels = namespace["metadata"].get("labels", {})
        if labels.get("pod-security.kubernetes.io/enforce") != "restricted":
            problem(name_of(namespace), "does not enforce Pod Security restricted")
    if problems:
        for line in problems:
            print(f"error: {line}", file=sys.stderr)
        return 1
    print(f"{len(objects)} objects valid against Kubernetes {', '.join(KUBERNETES_VERSIONS)}; "
          "pods pass Pod Security restricted")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
