#!/usr/bin/python3
"""The twin's apt mirror server (started by twin/mirror.ts inside the twin's
network namespace): one document root served over HTTP (deb.debian.org/debian,
security.debian.org/debian-security) and HTTPS with a twin-CA certificate
(pkgs.tailscale.com/stable/debian), and B2's download host (the host code bundle,
from --b2-root). Read-only, every request logged."""

import argparse
import functools
import http.server
import os
import ssl
import sys
import threading
import time

B2_DOWNLOAD_HOST = "f000.backblazeb2.com"


class Handler(http.server.SimpleHTTPRequestHandler):
    log_file = None
    b2_root = None

    def translate_path(self, path):
        # B2's download host (f000.backblazeb2.com): a public bucket's files at /file/<bucket>/<name>.
        host = (self.headers.get("Host") or "").split(":")[0]
        if host == B2_DOWNLOAD_HOST:
            if not path.startswith("/file/"):
                return os.path.join(self.b2_root, "nothing-here")
            return os.path.join(self.b2_root, super().translate_path(path)[len(self.directory):].lstrip("/"))
        return super().translate_path(path)

    def log_message(self, format, *args):
        host = self.headers.get("Host", "-") if getattr(self, "headers", None) else "-"
        line = "%s %s %s %s\n" % (
            time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()),
            self.client_address[0],
            host,
            format % args,
        )
        self.log_file.write(line)
        self.log_file.flush()


class TLSServer(http.server.ThreadingHTTPServer):
    """Ends each connection as a TLS server does, with close_notify (RFC 8446, 6.1):
    Python's SSLSocket.shutdown drops the TLS layer without it, and apt 3.0 (Debian 13,
    OpenSSL) refuses a response cut that way ("unexpected eof while reading")."""

    def shutdown_request(self, request):
        try:
            request.settimeout(5)
            request = request.unwrap()
        except (OSError, ValueError):
            pass
        super().shutdown_request(request)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--b2-root", required=True)
    args = parser.parse_args()

    Handler.log_file = open(args.log, "a", buffering=1)
    Handler.b2_root = os.path.abspath(args.b2_root)
    handler = functools.partial(Handler, directory=args.root)
    plain = http.server.ThreadingHTTPServer((args.address, 80), handler)
    secure = TLSServer((args.address, 443), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(args.cert, args.key)
    # The handshake happens in each request's thread: a stalled client holds only its own.
    secure.socket = context.wrap_socket(secure.socket, server_side=True, do_handshake_on_connect=False)
    for server in (plain, secure):
        server.daemon_threads = True
    threading.Thread(target=secure.serve_forever, daemon=True).start()
    Handler.log_file.write("serving http://%s:80 https://%s:443 from %s\n" % (args.address, args.address, args.root))
    Handler.log_file.flush()
    plain.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
