#!/usr/bin/python3
"""A stand-in for the Kubernetes API server, for tests: HTTPS, bearer tokens, answers shaped as a
real API server gives them, from the JSON fixtures in tests/fixtures/kubernetes/. No API server
installs on the test machines; the clients under test (profctl's, profd's) are the real ones.

  GET  /api/v1/pods?fieldSelector=spec.nodeName=NODE   --pods FILE, that node's pods only
  GET  /api/v1/namespaces/NS/pods?labelSelector=S&limit=N&continue=T
                                                       pods-NS.json, filtered, paged --page-size
  GET  /api/v1/namespaces/NS/pods/NAME                 that pod of pods-NS.json, as a Pod object
  GET  /apis/apps/v1/namespaces/NS/deployments/NAME    deployment-NS-NAME.json
  GET  /apis/batch/v1/namespaces/NS/jobs/NAME          job-NS-NAME.json
  POST /apis/authentication.k8s.io/v1/tokenreviews     who a token is: --users FILE's "tokens"
  POST /apis/authorization.k8s.io/v1/subjectaccessreviews
                                                       allowed by --users FILE's "bindings", as
                                                       RBAC would allow it

Every request needs --token or a token of --users as its bearer token (a 401 Status otherwise); anything else is a 404
Status; --forbidden answers the pod list with a 403. Each request is appended to --log as
"METHOD PATH token-ok|token-bad". Prints "port N" once it listens (--listen IP:PORT, default
127.0.0.1 and any free port). --host-ip-map A=B,... rewrites node addresses in the answers.
"""
import argparse
import copy
import json
import os
import re
import ssl
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def status(code, reason, message):
    return code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": message, "reason": reason, "code": code}


def parse_selector(text):
    """Kubernetes label selector syntax -> list of predicates over a labels dict."""
    preds = []
    for part in re.findall(r'[^,(]+(?:\([^)]*\))?', text):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r'([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)', part)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(',')}
            if op == 'in':
                preds.append(lambda l, k=key, v=values: l.get(k) in v)
            else:
                preds.append(lambda l, k=key, v=values: l.get(k) not in v)
            continue
        m = re.fullmatch(r'([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)', part)
        if m:
            key, op, value = m.groups()
            if op == '!=':
                preds.append(lambda l, k=key, v=value: l.get(k) != v)
            else:
                preds.append(lambda l, k=key, v=value: l.get(k) == v)
            continue
        m = re.fullmatch(r'(!?)([\w./-]+)', part)
        if m:
            neg, key = m.groups()
            preds.append((lambda l, k=key: k not in l) if neg else (lambda l, k=key: k in l))
            continue
        raise ValueError(part)
    return preds


def rule_allows(rule, attrs):
    def has(values, value):
        return "*" in values or value in values
    return (has(rule.get("apiGroups", []), attrs.get("group", "")) and
            has(rule.get("resources", []), attrs.get("resource", "")) and
            has(rule.get("verbs", []), attrs.get("verb", "")))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # the request log below is the record
        pass

    def record(self, token_ok):
        if self.server.options.log:
            with open(self.server.options.log, "a") as f:
                f.write("%s %s %s\n" % (self.command, self.path,
                                        "token-ok" if token_ok else "token-bad"))

    def send_json(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def fixture(self, name):
        path = os.path.join(self.server.options.fixtures, name)
        if not os.path.exists(path):
            return None
        with open(path) as f:
            text = f.read()
        for old, new in self.server.host_ip_map.items():
            text = text.replace('"%s"' % old, '"%s"' % new)
        return json.loads(text)

    def authenticated(self):
        # --token (the service account's) or a user's from --users.
        given = self.headers.get("Authorization", "")
        token_ok = given == "Bearer " + self.server.options.token or any(
            given == "Bearer " + t for t in self.server.users.get("tokens", {}))
        self.record(token_ok)
        if not token_ok:
            self.send_json(*status(401, "Unauthorized", "Unauthorized"))
        return token_ok

    def do_GET(self):
        if not self.authenticated():
            return
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path == "/api/v1/pods" and self.server.options.pods:
            return self.node_pods(query)
        m = re.fullmatch(r'/api/v1/namespaces/([a-z0-9-]+)/pods', url.path)
        if m:
            return self.pods(m.group(1), query)
        m = re.fullmatch(r'/api/v1/namespaces/([a-z0-9-]+)/pods/([a-z0-9.-]+)', url.path)
        if m:
            return self.pod(m.group(1), m.group(2))
        m = re.fullmatch(
            r'/apis/(apps|batch)/v1/namespaces/([a-z0-9-]+)/(deployments|jobs)/([a-z0-9.-]+)',
            url.path)
        if m:
            kind = "deployment" if m.group(3) == "deployments" else "job"
            body = self.fixture("%s-%s-%s.json" % (kind, m.group(2), m.group(4)))
            if body is None:
                return self.send_json(*status(404, "NotFound", '%s.%s "%s" not found' % (
                    m.group(3), m.group(1), m.group(4))))
            return self.send_json(200, body)
        return self.not_found()

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        review = json.loads(self.rfile.read(length) or b"{}")
        if not self.authenticated():
            return
        if self.path == "/apis/authentication.k8s.io/v1/tokenreviews":
            return self.token_review(review)
        if self.path == "/apis/authorization.k8s.io/v1/subjectaccessreviews":
            return self.access_review(review)
        return self.not_found()

    def not_found(self):
        return self.send_json(*status(404, "NotFound",
                                      "the server could not find the requested resource"))

    def node_pods(self, query):
        if self.server.options.forbidden:
            return self.send_json(*status(
                403, "Forbidden", "pods is forbidden: User \"system:serviceaccount:profd:profd\" "
                "cannot list resource \"pods\" in API group \"\" at the cluster scope"))
        with open(self.server.options.pods) as f:
            pods = json.load(f)
        selector = query.get("fieldSelector", [""])[0]
        if selector.startswith("spec.nodeName="):
            node = selector.split("=", 1)[1]
            pods["items"] = [p for p in pods.get("items") or []
                             if p.get("spec", {}).get("nodeName") == node]
        return self.send_json(200, pods)

    def pods(self, ns, query):
        body = self.fixture("pods-%s.json" % ns) or {
            "kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
            "items": []}
        try:
            preds = parse_selector(query.get("labelSelector", [""])[0])
        except ValueError as e:
            return self.send_json(*status(400, "BadRequest",
                                          "unable to parse requirement: %s" % e))
        items = [p for p in body["items"]
                 if all(pred(p["metadata"].get("labels", {})) for pred in preds)]
        start = int(query.get("continue", ["0"])[0] or 0)
        limit = int(query.get("limit", ["0"])[0] or 0) or len(items)
        size = min(limit, self.server.options.page_size or limit)
        page = copy.deepcopy(body)
        page["items"] = items[start:start + size]
        page["metadata"].pop("continue", None)
        if start + size < len(items):
            page["metadata"]["continue"] = str(start + size)
            page["metadata"]["remainingItemCount"] = len(items) - start - size
        return self.send_json(200, page)

    def pod(self, ns, name):
        # The list's item, with the kind and apiVersion a single object carries.
        body = self.fixture("pods-%s.json" % ns) or {"items": []}
        for item in body["items"]:
            if item["metadata"]["name"] == name:
                return self.send_json(200, dict({"kind": "Pod", "apiVersion": "v1"}, **item))
        return self.send_json(*status(404, "NotFound", 'pods "%s" not found' % name))

    # TokenReview and SubjectAccessReview answer 201 Created with the review, spec echoed and
    # status filled in, as the API server does.
    def token_review(self, review):
        user = self.server.users.get("tokens", {}).get(review.get("spec", {}).get("token", ""))
        answer = {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                  "metadata": {"creationTimestamp": None}, "spec": review.get("spec", {}),
                  "status": {"user": {}}}
        if user is None:
            answer["status"]["error"] = "[invalid bearer token, token lookup failed]"
        else:
            answer["status"] = {"authenticated": True, "user": user,
                                "audiences": ["https://kubernetes.default.svc.cluster.local"]}
        return self.send_json(201, answer)

    def access_review(self, review):
        spec = review.get("spec", {})
        attrs = spec.get("resourceAttributes", {})
        subjects = {("User", spec.get("user"))} | {("Group", g) for g in spec.get("groups", [])}
        allowed_by = None
        for b in self.server.users.get("bindings", []):
            if b.get("namespace") and b["namespace"] != attrs.get("namespace"):
                continue
            if not any((s["kind"], s["name"]) in subjects for s in b["subjects"]):
                continue
            if any(rule_allows(r, attrs) for r in b["rules"]):
                allowed_by = b
                break
        status_ = {"allowed": allowed_by is not None}
        if allowed_by is not None:
            subject = next(s for s in allowed_by["subjects"] if (s["kind"], s["name"]) in subjects)
            status_["reason"] = 'RBAC: allowed by %s "%s" of ClusterRole "%s" to %s "%s"' % (
                "RoleBinding" if allowed_by.get("namespace") else "ClusterRoleBinding",
                allowed_by["name"] + ("/" + allowed_by["namespace"]
                                      if allowed_by.get("namespace") else ""),
                allowed_by["role"], subject["kind"], subject["name"])
        return self.send_json(201, {"kind": "SubjectAccessReview",
                                    "apiVersion": "authorization.k8s.io/v1",
                                    "metadata": {"creationTimestamp": None}, "spec": spec,
                                    "status": status_})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures",
                    default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                         "fixtures", "kubernetes"))
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--pods")
    ap.add_argument("--forbidden", action="store_true")
    ap.add_argument("--users", help="tokens and RBAC bindings (tests/fixtures/kubernetes/"
                                    "users.json)")
    ap.add_argument("--page-size", type=int, default=0)
    ap.add_argument("--host-ip-map", default="")
    ap.add_argument("--log", default="")
    options = ap.parse_args()
    host, port = options.listen.rsplit(":", 1)
    server = ThreadingHTTPServer((host, int(port)), Handler)
    server.options = options
    server.host_ip_map = dict(p.split("=", 1) for p in options.host_ip_map.split(",") if p)
    server.users = {}
    if options.users:
        with open(options.users) as f:
            server.users = json.load(f)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(options.cert, options.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print("port %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
