#!/usr/bin/python3
"""The Kubernetes manifests as a cluster would take them.

Renders deploy/kubernetes (profd's base) and deploy/kubernetes/examples/serving with
`kubectl kustomize` and checks every object:
  - against the Kubernetes API's own schema, as the python3-kubernetes models carry it: every
    field known (a misspelt one is an error, not silently dropped), every required field present,
    every value of its type, all the way down;
  - custom resources (the Prometheus Operator's ServiceMonitor) against the fields profd uses;
  - Pod Security: every Namespace has its enforce label; profd's is privileged; a pod in a
    namespace that enforces baseline meets baseline (no hostPath, hostPID, hostNetwork, hostIPC,
    privileged, added capabilities, host ports) and, as the example warns at restricted, restricted.
Then it proves the checks can fail: it copies the manifests to a temporary folder, breaks one
thing at a time (a required field, the PSS label, a type, a misspelt field, a hostPath in the
application pod), renders each copy and expects the matching error.

Usage: kubernetes_manifests_test.py SOURCE_DIR [KUBECTL]. Exit 77 (skipped) without kubectl.
"""

import copy
import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

try:
    import kubernetes.client.models as k8s_models
except ImportError:
    sys.exit("kubernetes_manifests_test: python3-kubernetes is missing (apt-get install "
             "python3-kubernetes; scripts/setup.sh installs it)")

SKIPPED = 77
PSS_ENFORCE = "pod-security.kubernetes.io/enforce"

# Python-side names of the primitive types the models use.
PRIMITIVES = {"str", "int", "float", "bool", "object", "datetime", "date"}


def render(kubectl, folder):
    result = subprocess.run([kubectl, "kustomize", folder], capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        raise RuntimeError("kubectl kustomize %s failed: %s" % (folder, result.stderr.strip()))
    return [o for o in yaml.safe_load_all(result.stdout) if o is not None]


def model_class(api_version, kind):
    version = api_version.split("/")[-1]
    name = version[0].upper() + version[1:] + kind
    return getattr(k8s_models, name, None)


_required_cache = {}


def required_fields(klass):
    """The attributes whose setter refuses None: the OpenAPI schema's `required`."""
    if klass not in _required_cache:
        source = inspect.getsource(klass)
        _required_cache[klass] = set(
            re.findall(r"client_side_validation and (\w+) is None", source))
    return _required_cache[klass]


def check_value(value, type_name, path, errors):
    """Checks `value` against the model type `type_name` (e.g. 'V1PodSpec', 'list[V1Volume]')."""
    if value is None:
        return
    if type_name.startswith("list["):
        if not isinstance(value, list):
            errors.append("%s: expected a list (%s), got %r" % (path, type_name, value))
            return
        for i, item in enumerate(value):
            check_value(item, type_name[5:-1], "%s[%d]" % (path, i), errors)
        return
    if type_name.startswith("dict("):
        if not isinstance(value, dict):
            errors.append("%s: expected a map (%s), got %r" % (path, type_name, value))
            return
        inner = type_name[type_name.index(",") + 1:-1].strip()
        for key, item in value.items():
            check_value(item, inner, "%s.%s" % (path, key), errors)
        return
    if type_name in PRIMITIVES:
        check_primitive(value, type_name, path, errors)
        return
    klass = getattr(k8s_models, type_name, None)
    if klass is None:
        errors.append("%s: the schema names an unknown type %s" % (path, type_name))
        return
    check_model(value, klass, path, errors)


def check_primitive(value, type_name, path, errors):
    ok = {
        "str": isinstance(value, str),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "object": True,  # IntOrString, free-form JSON
        "datetime": isinstance(value, str),
        "date": isinstance(value, str),
    }[type_name]
    # Resource quantities are strings in the schema and numbers are accepted for them
    # (`nvidia.com/gpu: 1`).
    if not ok and type_name == "str" and re.search(r"\.(limits|requests)\.[^\[\]]+$", path):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        errors.append("%s: expected %s, got %r" % (path, type_name, value))


def check_model(value, klass, path, errors):
    if not isinstance(value, dict):
        errors.append("%s: expected an object (%s), got %r" % (path, klass.__name__, value))
        return
    by_json_name = {json: attr for attr, json in klass.attribute_map.items()}
    for key in value:
        if key not in by_json_name:
            errors.append("%s: unknown field %r in %s" % (path, key, klass.__name__))
    for attr in sorted(required_fields(klass)):
        json_name = klass.attribute_map[attr]
        if value.get(json_name) is None:
            errors.append("%s: required field %r of %s is missing" %
                          (path, json_name, klass.__name__))
    for key, item in value.items():
        if key in by_json_name:
            attr = by_json_name[key]
            check_value(item, klass.openapi_types[attr], "%s.%s" % (path, key), errors)


# The Prometheus Operator's resources are not in the Kubernetes schema: the fields profd's
# manifests use, with their types and what its CRD requires.
def check_service_monitor(obj, path, errors):
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        errors.append("%s.spec: required" % path)
        return
    known = {"selector", "namespaceSelector", "endpoints", "jobLabel", "podTargetLabels",
             "targetLabels", "sampleLimit"}
    for key in spec:
        if key not in known:
            errors.append("%s.spec: unknown field %r in ServiceMonitor" % (path, key))
    selector = spec.get("selector")
    if selector is None:
        errors.append("%s.spec: required field 'selector' of ServiceMonitor is missing" % path)
    else:
        check_value(selector, "V1LabelSelector", path + ".spec.selector", errors)
    endpoints = spec.get("endpoints")
    if not isinstance(endpoints, list) or not endpoints:
        errors.append("%s.spec.endpoints: expected a non-empty list" % path)
        return
    endpoint_fields = {"port": str, "path": str, "interval": str, "scheme": str,
                       "scrapeTimeout": str, "relabelings": list, "metricRelabelings": list,
                       "honorLabels": bool}
    for i, endpoint in enumerate(endpoints):
        where = "%s.spec.endpoints[%d]" % (path, i)
        for key, item in endpoint.items():
            if key not in endpoint_fields:
                errors.append("%s: unknown field %r in an endpoint" % (where, key))
            elif not isinstance(item, endpoint_fields[key]):
                errors.append("%s.%s: expected %s, got %r" %
                              (where, key, endpoint_fields[key].__name__, item))
        if "interval" in endpoint and not re.fullmatch(r"(\d+(ms|s|m|h))+",
                                                       str(endpoint["interval"])):
            errors.append("%s.interval: not a Prometheus duration: %r" % (where, endpoint["interval"]))


CUSTOM = {("monitoring.coreos.com/v1", "ServiceMonitor"): check_service_monitor}


def check_object(obj, errors):
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    name = (obj.get("metadata") or {}).get("name", "?")
    path = "%s/%s" % (kind, name)
    if not api_version or not kind:
        errors.append("%s: apiVersion and kind are required" % path)
        return
    if not (obj.get("metadata") or {}).get("name"):
        errors.append("%s: metadata.name is required" % path)
    custom = CUSTOM.get((api_version, kind))
    if custom is not None:
        check_value(obj.get("metadata"), "V1ObjectMeta", path + ".metadata", errors)
        custom(obj, path, errors)
        return
    klass = model_class(api_version, kind)
    if klass is None:
        errors.append("%s: %s %s is not a Kubernetes type this test knows" %
                      (path, api_version, kind))
        return
    check_model(obj, klass, path, errors)


# --- Pod Security ---------------------------------------------------------------------------

BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
                         "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID",
                         "SYS_CHROOT"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}


def pod_specs(obj):
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind == "Pod":
        yield spec
    elif kind in ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"):
        yield (spec.get("template") or {}).get("spec") or {}
    elif kind == "CronJob":
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        yield (job.get("template") or {}).get("spec") or {}


def containers_of(pod):
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in pod.get(field) or []:
            yield field, c


def check_baseline(pod, where, errors):
    for flag in ("hostPID", "hostIPC", "hostNetwork"):
        if pod.get(flag):
            errors.append("%s: %s is not allowed at baseline" % (where, flag))
    for volume in pod.get("volumes") or []:
        if "hostPath" in volume:
            errors.append("%s: volume %r is a hostPath, not allowed at baseline" %
                          (where, volume.get("name")))
    for field, c in containers_of(pod):
        at = "%s.%s[%s]" % (where, field, c.get("name"))
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            errors.append("%s: privileged is not allowed at baseline" % at)
        added = set((sc.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            errors.append("%s: capabilities %s are not allowed at baseline" %
                          (at, sorted(added - BASELINE_CAPABILITIES)))
        if sc.get("procMount", "Default") != "Default":
            errors.append("%s: procMount is not allowed at baseline" % at)
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                errors.append("%s: hostPort is not allowed at baseline" % at)


def check_restricted(pod, where, errors):
    pod_sc = pod.get("securityContext") or {}
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            errors.append("%s: volume %r (%s) is not allowed at restricted" %
                          (where, volume.get("name"), ", ".join(sorted(kinds))))
    for field, c in containers_of(pod):
        at = "%s.%s[%s]" % (where, field, c.get("name"))
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            errors.append("%s: allowPrivilegeEscalation must be false at restricted" % at)
        if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
            errors.append("%s: runAsNonRoot must be true at restricted" % at)
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            errors.append("%s: runAsUser 0 is not allowed at restricted" % at)
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            errors.append("%s: capabilities must drop ALL at restricted" % at)
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            errors.append("%s: only NET_BIND_SERVICE may be added at restricted" % at)
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            errors.append("%s: seccompProfile must be RuntimeDefault or Localhost at restricted" % at)


def check_pod_security(objects, errors, profd_namespace=None):
    levels = {}
    for obj in objects:
        if obj.get("kind") != "Namespace":
            continue
        name = obj["metadata"]["name"]
        labels = obj["metadata"].get("labels") or {}
        level = labels.get(PSS_ENFORCE)
        if level not in ("privileged", "baseline", "restricted"):
            errors.append("Namespace/%s: label %s is missing or not a Pod Security level (%r)" %
                          (name, PSS_ENFORCE, level))
        levels[name] = (level, labels.get("pod-security.kubernetes.io/warn"))
    if profd_namespace is not None and levels.get(profd_namespace, (None,))[0] != "privileged":
        errors.append("Namespace/%s: profd's namespace must enforce privileged (it needs the host)"
                      % profd_namespace)
    for obj in objects:
        namespace = (obj.get("metadata") or {}).get("namespace")
        if namespace is None or namespace not in levels:
            continue
        enforce, warn = levels[namespace]
        for pod in pod_specs(obj):
            where = "%s/%s (namespace %s, enforce %s)" % (obj["kind"], obj["metadata"]["name"],
                                                         namespace, enforce)
            if enforce in ("baseline", "restricted"):
                check_baseline(pod, where, errors)
            if "restricted" in (enforce, warn):
                check_restricted(pod, where, errors)


def check_profd_pieces(objects, errors):
    """What the base must carry beyond the schema: the pieces docs/DEPLOY.md promises."""
    kinds = {(o.get("kind"), (o.get("metadata") or {}).get("name")) for o in objects}
    for wanted in [("Namespace", "profd"), ("DaemonSet", "profd"), ("ServiceAccount", "profd"),
                   ("ServiceAccount", "profd-fleet"), ("ClusterRole", "profd-node"),
                   ("ClusterRole", "profd-fleet"), ("ClusterRole", "profd-capturer"),
                   ("CSIDriver", "csi.profd.dev"),
                   ("Service", "profd-metrics"), ("ServiceMonitor", "profd"),
                   ("Secret", "profd-s3-credentials"), ("PriorityClass", "profd-node-agent"),
                   ("Deployment", "profd-gateway"), ("Service", "profd-gateway")]:
        if wanted not in kinds:
            errors.append("%s/%s is missing from the base" % wanted)
    for obj in objects:
        if obj.get("kind") == "Deployment" and obj["metadata"]["name"] == "profd-gateway":
            check_gateway(obj, errors)
        if obj.get("kind") != "DaemonSet":
            continue
        pod = obj["spec"]["template"]["spec"]
        profd = next((c for c in pod.get("containers", []) if c.get("name") == "profd"), None)
        if profd is None:
            errors.append("DaemonSet/profd: no container named profd")
            continue
        for probe in ("livenessProbe", "readinessProbe"):
            if probe not in profd:
                errors.append("DaemonSet/profd: the profd container has no %s" % probe)
        env = {e.get("name"): e.get("value") for e in profd.get("env") or []}
        if pod.get("runtimeClassName") != "nvidia" and env.get("NVIDIA_VISIBLE_DEVICES") != "all":
            errors.append("DaemonSet/profd: NVML is not visible (runtimeClassName nvidia or "
                          "NVIDIA_VISIBLE_DEVICES=all)")
        if not pod.get("priorityClassName"):
            errors.append("DaemonSet/profd: no priorityClassName")


def check_gateway(obj, errors):
    """The gateway runs `profctl gateway` as the profd-fleet service account, authorizing users
    with the API server, probed on its own port."""
    pod = obj["spec"]["template"]["spec"]
    if pod.get("serviceAccountName") != "profd-fleet":
        errors.append("Deployment/profd-gateway: not the profd-fleet service account")
    container = (pod.get("containers") or [{}])[0]
    args = container.get("args") or []
    if "gateway" not in args:
        errors.append("Deployment/profd-gateway: its container does not run `profctl gateway`")
    if not any(a.startswith("--kubernetes_authorization=") and not a.endswith("=none")
               for a in args):
        errors.append("Deployment/profd-gateway: users are not authorized by the API server")
    for probe in ("livenessProbe", "readinessProbe"):
        if (container.get(probe) or {}).get("httpGet", {}).get("path") != "/healthz":
            errors.append("Deployment/profd-gateway: no %s on /healthz" % probe)
    if not (pod.get("securityContext") or {}).get("runAsNonRoot"):
        errors.append("Deployment/profd-gateway: runs as root")


def drop_gateway_authorization(doc):
    if doc.get("kind") == "Deployment":
        args = doc["spec"]["template"]["spec"]["containers"][0]["args"]
        args[:] = [a for a in args if not a.startswith("--kubernetes_authorization")]


def validate(kubectl, source, parts=("base", "example")):
    base = render(kubectl, os.path.join(source, "deploy/kubernetes")) if "base" in parts else []
    example = (render(kubectl, os.path.join(source, "deploy/kubernetes/examples/serving"))
               if "example" in parts else [])
    errors = []
    for obj in base + example:
        check_object(obj, errors)
    check_pod_security(base, errors, profd_namespace="profd")
    check_pod_security(example, errors)
    if base:
        check_profd_pieces(base, errors)
    return errors, base, example


# --- the checks can fail --------------------------------------------------------------------

def edit_yaml(path, change):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    for doc in docs:
        change(doc)
    with open(path, "w") as f:
        yaml.safe_dump_all(docs, f, sort_keys=False)


def drop_pss_label(doc):
    if doc.get("kind") == "Namespace":
        del doc["metadata"]["labels"][PSS_ENFORCE]


def drop_daemonset_selector(doc):
    if doc.get("kind") == "DaemonSet":
        del doc["spec"]["selector"]


def drop_port_of_service(doc):
    if doc.get("kind") == "Service":
        del doc["spec"]["ports"][0]["port"]


def port_as_text(doc):
    if doc.get("kind") == "DaemonSet":
        doc["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "ninety"


def misspelt_field(doc):
    if doc.get("kind") == "DaemonSet":
        doc["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"


def app_host_path(doc):
    if doc.get("kind") == "Deployment":
        doc["spec"]["template"]["spec"]["volumes"][0] = {
            "name": "profd", "hostPath": {"path": "/run/profd", "type": "Directory"}}


def app_privileged(doc):
    if doc.get("kind") == "Deployment":
        doc["spec"]["template"]["spec"]["hostPID"] = True
        doc["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] = True


def drop_service_monitor_selector(doc):
    if doc.get("kind") == "ServiceMonitor":
        del doc["spec"]["selector"]


MUTATIONS = [
    ("namespace.yaml", drop_pss_label, "label pod-security.kubernetes.io/enforce is missing"),
    ("daemonset.yaml", drop_daemonset_selector, "required field 'selector' of V1DaemonSetSpec"),
    ("service.yaml", drop_port_of_service, "required field 'port' of V1ServicePort"),
    ("daemonset.yaml", port_as_text, "containerPort: expected int, got 'ninety'"),
    ("daemonset.yaml", misspelt_field, "unknown field 'imagePullPolicyy' in V1Container"),
    ("gateway.yaml", drop_gateway_authorization,
     "Deployment/profd-gateway: users are not authorized by the API server"),
    ("servicemonitor.yaml", drop_service_monitor_selector,
     "required field 'selector' of ServiceMonitor"),
    ("examples/serving/namespace.yaml", drop_pss_label,
     "Namespace/serving: label pod-security.kubernetes.io/enforce is missing"),
    ("examples/serving/deployment.yaml", app_host_path,
     "volume 'profd' is a hostPath, not allowed at baseline"),
    ("examples/serving/deployment.yaml", app_privileged,
     "hostPID is not allowed at baseline"),
]


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: kubernetes_manifests_test.py SOURCE_DIR [KUBECTL]")
    source = sys.argv[1]
    kubectl = sys.argv[2] if len(sys.argv) > 2 else shutil.which("kubectl")
    if not kubectl or not os.path.exists(kubectl):
        print("SKIPPED: kubectl is not installed (it renders the kustomize base)")
        return SKIPPED
    failures = 0
    errors, base, example = validate(kubectl, source)
    print("rendered %d objects (base) and %d (examples/serving)" % (len(base), len(example)))
    for error in errors:
        print("FAIL: %s" % error)
    failures += len(errors)
    with tempfile.TemporaryDirectory(prefix="profd-manifests-") as tmp:
        for file_name, change, expected in MUTATIONS:
            copy_root = os.path.join(tmp, "copy")
            shutil.rmtree(copy_root, ignore_errors=True)
            shutil.copytree(os.path.join(source, "deploy/kubernetes"),
                            os.path.join(copy_root, "deploy/kubernetes"))
            edit_yaml(os.path.join(copy_root, "deploy/kubernetes", file_name), change)
            part = "example" if file_name.startswith("examples/") else "base"
            found, _, _ = validate(kubectl, copy_root, (part,))
            name = "%s in %s" % (change.__name__, file_name)
            if any(expected in e for e in found):
                print("ok: %s is caught" % name)
            else:
                failures += 1
                print("FAIL: %s went unnoticed; wanted %r, got %s" % (name, expected, found))
    passed = 1 + len(MUTATIONS) - min(failures, 1 + len(MUTATIONS))
    print("%d passed, %d failed" % (passed, 1 + len(MUTATIONS) - passed))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
