#!/usr/bin/python3 -IS
"""airlock twin: the stand-in for the B2 buckets the backups go to.

restic's REST backend protocol (v1 and v2 listings, ranged reads), served from a
directory with one repository per first path segment (/gateway/, /sandbox/), in
append-only mode like the host's B2 key (no deleteFiles): files are created once
and never replaced or deleted, except restic's locks. Debian ships no rest-server;
this is the protocol restic speaks to it, nothing more (no auth, no TLS, no quotas).
Every request is logged. Usage: rest-server.py --root DIR --address A --port P
"""
import argparse
import http.server
import json
import os
import re
import sys
import threading

TYPES = ("data", "keys", "locks", "snapshots", "index")
NAME = re.compile(r"^[0-9a-f]{64}$")
REPO = re.compile(r"^[a-z0-9-]+$")
V2 = "application/vnd.x.restic.rest.v2"


class Handler(http.server.BaseHTTPRequestHandler):
    root = "."
    lock = threading.Lock()
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stdout.write("%s %s\n" % (self.address_string(), fmt % args))
        sys.stdout.flush()

    def reply(self, status, body=b"", content_type="application/octet-stream", headers=None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def target(self):
        """(repo dir, type or 'config' or '', name or '') of the request path, or None."""
        parts = self.path.split("?")[0].strip("/").split("/")
        if not parts or not REPO.match(parts[0]) or len(parts) > 3:
            return None
        repo = os.path.join(self.root, parts[0])
        rest = parts[1:]
        if not rest or rest == [""]:
            return repo, "", ""
        if rest == ["config"]:
            return repo, "config", ""
        if rest[0] not in TYPES:
            return None
        if len(rest) == 1 or rest[1] == "":
            return repo, rest[0], ""
        if not NAME.match(rest[1]):
            return None
        return repo, rest[0], rest[1]

    def file_of(self, repo, kind, name):
        if kind == "config":
            return os.path.join(repo, "config")
        if kind == "data":
            return os.path.join(repo, "data", name[:2], name)
        return os.path.join(repo, kind, name)

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length)

    def do_POST(self):
        target = self.target()
        if target is None:
            return self.reply(400)
        repo, kind, name = target
        data = self.body()
        if kind == "" and "create=true" in self.path:
            with self.lock:
                if os.path.exists(os.path.join(repo, "config")):
                    return self.reply(403)
                for t in TYPES:
                    os.makedirs(os.path.join(repo, t), exist_ok=True)
                for i in range(256):
                    os.makedirs(os.path.join(repo, "data", "%02x" % i), exist_ok=True)
            return self.reply(200)
        if kind == "" or (kind != "config" and not name):
            return self.reply(400)
        path = self.file_of(repo, kind, name)
        with self.lock:
            # Append-only: what exists is never replaced.
            if os.path.exists(path):
                return self.reply(403)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            staged = path + ".tmp"
            with open(staged, "wb") as f:
                f.write(data)
            os.rename(staged, path)
        return self.reply(200)

    def do_DELETE(self):
        target = self.target()
        if target is None:
            return self.reply(400)
        repo, kind, name = target
        self.body()
        if kind != "locks" or not name:
            return self.reply(403)
        try:
            os.remove(self.file_of(repo, kind, name))
        except FileNotFoundError:
            return self.reply(404)
        return self.reply(200)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        target = self.target()
        if target is None:
            return self.reply(400)
        repo, kind, name = target
        if kind in TYPES and not name:
            directory = os.path.join(repo, kind)
            if not os.path.isdir(directory):
                return self.reply(404)
            files = []
            for base, _, names in os.walk(directory):
                files += [(n, os.path.getsize(os.path.join(base, n))) for n in names if NAME.match(n)]
            if V2 in (self.headers.get("Accept") or ""):
                listing = [{"name": n, "size": s} for n, s in sorted(files)]
                return self.reply(200, json.dumps(listing).encode(), V2)
            return self.reply(200, json.dumps(sorted(n for n, _ in files)).encode(), "application/vnd.x.restic.rest.v1")
        if kind == "":
            return self.reply(400)
        path = self.file_of(repo, kind, name)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return self.reply(404)
        ranged = re.match(r"^bytes=(\d+)-(\d*)$", self.headers.get("Range") or "")
        if ranged:
            start = int(ranged.group(1))
            end = int(ranged.group(2)) if ranged.group(2) else len(data) - 1
            if start >= len(data):
                return self.reply(416)
            part = data[start : end + 1]
            return self.reply(206, part, headers={"Content-Range": "bytes %d-%d/%d" % (start, start + len(part) - 1, len(data))})
        return self.reply(200, data)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    Handler.root = args.root
    os.makedirs(args.root, exist_ok=True)
    server = http.server.ThreadingHTTPServer((args.address, args.port), Handler)
    sys.stdout.write("serving restic's REST protocol on %s:%d from %s\n" % (args.address, args.port, args.root))
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
