#!/usr/bin/python3
"""A stand-in for the Kubernetes API server, for tests: HTTPS, bearer tokens, recorded answers.

No API server installs on the test machines, so this serves the answers recorded in
tests/fixtures/kubernetes/ the way the API server does: over TLS with the given certificate,
401 with a Status for a missing or wrong bearer token, the PodList for GET /api/v1/pods (with
its fieldSelector=spec.nodeName=NODE: only that node's pods), 404 otherwise. Each request is
appended to --log as "METHOD PATH TOKEN-OK". It prints "port N" once it listens.

Usage: kubernetes_api_stand_in.py --cert PEM --key PEM --token TOKEN --pods PODLIST.json
                                  [--log FILE] [--forbidden]
"""

import argparse
import http.server
import json
import ssl
import sys
import urllib.parse


def status(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):  # the request log below is the record
        pass

    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        options = self.server.options
        token_ok = self.headers.get("Authorization") == "Bearer " + options.token
        if options.log:
            with open(options.log, "a") as log:
                log.write("GET %s %s\n" % (self.path, "token-ok" if token_ok else "token-bad"))
        if not token_ok:
            self.answer(401, status(401, "Unauthorized", "Unauthorized"))
            return
        url = urllib.parse.urlparse(self.path)
        if url.path != "/api/v1/pods":
            self.answer(404, status(404, "NotFound", "the server could not find the requested "
                                                     "resource"))
            return
        if options.forbidden:
            self.answer(403, status(403, "Forbidden", "pods is forbidden: User "
                                    "\"system:serviceaccount:profd:profd\" cannot list resource "
                                    "\"pods\" in API group \"\" at the cluster scope"))
            return
        with open(options.pods) as f:
            pods = json.load(f)
        selector = urllib.parse.parse_qs(url.query).get("fieldSelector", [""])[0]
        if selector.startswith("spec.nodeName="):
            node = selector.split("=", 1)[1]
            pods["items"] = [p for p in pods.get("items") or []
                             if p.get("spec", {}).get("nodeName") == node]
        self.answer(200, pods)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--pods", required=True)
    parser.add_argument("--log")
    parser.add_argument("--forbidden", action="store_true")
    options = parser.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.options = options
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(options.cert, options.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print("port %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
