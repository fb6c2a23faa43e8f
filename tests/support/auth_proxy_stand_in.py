#!/usr/bin/python3
"""A stand-in for the authenticating proxy in front of the gateway (oauth2-proxy and the like),
for tests: every request is passed to --upstream with the identity it vouches for in
X-Forwarded-User and X-Forwarded-Groups (any the client sent are replaced), from --source, the
address the gateway trusts (--trusted_proxy). Prints "port N" once it listens.
"""
import argparse
import http.client
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "host",
              "x-forwarded-user", "x-forwarded-groups"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def forward(self):
        o = self.server.options
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["X-Forwarded-User"] = o.user
        headers["X-Forwarded-Groups"] = o.groups
        host, port = o.upstream.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=60,
                                          source_address=(o.source, 0))
        conn.request(self.command, self.path, body=body, headers=headers)
        answer = conn.getresponse()
        data = answer.read()
        self.send_response(answer.status, answer.reason)
        for k, v in answer.getheaders():
            if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        conn.close()

    do_GET = forward
    do_POST = forward


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--groups", default="")
    options = ap.parse_args()
    host, port = options.listen.rsplit(":", 1)
    server = ThreadingHTTPServer((host, int(port)), Handler)
    server.options = options
    print("port %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
