#!/usr/bin/env python3
"""A stand-in for the Kubernetes API server in tests (no API server installs here): HTTPS with the
test's certificate, bearer-token authentication, and the read-only routes profctl uses, answered
from the JSON fixtures in tests/fixtures/kubernetes/ (shaped as a real API server answers):

  GET /api/v1/namespaces/NS/pods?labelSelector=S&limit=N&continue=T   pods-NS.json, filtered
  GET /apis/apps/v1/namespaces/NS/deployments/NAME                    deployment-NS-NAME.json
  GET /apis/batch/v1/namespaces/NS/jobs/NAME                          job-NS-NAME.json

Anything else is a 404 Status, a wrong or missing token a 401 Status, as the API server answers.
Pod lists are paged --page-size items at a time (the API may answer fewer than `limit`), with
metadata.continue, so clients must follow it. --host-ip-map A=B,... rewrites node addresses.

  kubernetes_api_standin.py --fixtures DIR --cert PEM --key PEM --token T --listen IP:PORT
      [--page-size N] [--host-ip-map A=B,...] [--requests-log FILE]
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


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        if self.server.requests_log:
            with open(self.server.requests_log, "a") as f:
                f.write(self.path + "\n")

    def send_json(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def fixture(self, name):
        path = os.path.join(self.server.fixtures, name)
        if not os.path.exists(path):
            return None
        with open(path) as f:
            text = f.read()
        for old, new in self.server.host_ip_map.items():
            text = text.replace('"%s"' % old, '"%s"' % new)
        return json.loads(text)

    def do_GET(self):
        self.log_message("")
        if self.headers.get("Authorization") != "Bearer " + self.server.token:
            return self.send_json(*status(401, "Unauthorized", "Unauthorized"))
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        m = re.fullmatch(r'/api/v1/namespaces/([a-z0-9-]+)/pods', url.path)
        if m:
            return self.pods(m.group(1), query)
        m = re.fullmatch(r'/apis/(apps|batch)/v1/namespaces/([a-z0-9-]+)/(deployments|jobs)/([a-z0-9.-]+)',
                         url.path)
        if m:
            kind = "deployment" if m.group(3) == "deployments" else "job"
            body = self.fixture("%s-%s-%s.json" % (kind, m.group(2), m.group(4)))
            if body is None:
                return self.send_json(*status(404, "NotFound", '%s.%s "%s" not found' % (
                    m.group(3), m.group(1), m.group(4))))
            return self.send_json(200, body)
        return self.send_json(*status(404, "NotFound", "the server could not find the requested resource"))

    def pods(self, ns, query):
        body = self.fixture("pods-%s.json" % ns) or {
            "kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": []}
        try:
            preds = parse_selector(query.get("labelSelector", [""])[0])
        except ValueError as e:
            return self.send_json(*status(400, "BadRequest",
                                          "unable to parse requirement: %s" % e))
        items = [p for p in body["items"]
                 if all(pred(p["metadata"].get("labels", {})) for pred in preds)]
        start = int(query.get("continue", ["0"])[0] or 0)
        limit = int(query.get("limit", ["0"])[0] or 0) or len(items)
        size = min(limit, self.server.page_size or limit)
        page = copy.deepcopy(body)
        page["items"] = items[start:start + size]
        page["metadata"].pop("continue", None)
        if start + size < len(items):
            page["metadata"]["continue"] = str(start + size)
            page["metadata"]["remainingItemCount"] = len(items) - start - size
        return self.send_json(200, page)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--listen", required=True)
    ap.add_argument("--page-size", type=int, default=0)
    ap.add_argument("--host-ip-map", default="")
    ap.add_argument("--requests-log", default="")
    args = ap.parse_args()
    host, port = args.listen.rsplit(":", 1)
    server = ThreadingHTTPServer((host, int(port)), Handler)
    server.fixtures = args.fixtures
    server.token = args.token
    server.page_size = args.page_size
    server.requests_log = args.requests_log
    server.host_ip_map = dict(p.split("=", 1) for p in args.host_ip_map.split(",") if p)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print("listening", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
