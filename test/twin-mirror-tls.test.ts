import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { TWIN_SOURCES } from "../twin/sources";
import { tempDir } from "./helpers/stacks";
import { isRoot, toolsAvailable } from "./helpers/tools";

/**
 * The twin's mirror answers HTTPS as pkgs.tailscale.com and B2's download host. A TLS
 * server ends a connection with close_notify (RFC 8446, 6.1), and Debian 13's apt (3.0,
 * on OpenSSL) refuses a response cut without it: "unexpected eof while reading", seen in
 * the first trixie twin run, where no guest could install Tailscale. Here the real
 * server, in a network namespace of its own, answers a client as strict as apt's.
 */

const canRun = isRoot() && toolsAvailable("the mirror's TLS shutdown", ["unshare", "openssl", "python3"]);
if (!isRoot()) console.warn("SKIPPED the mirror's TLS shutdown: needs root (a network namespace for ports 80 and 443)");

const STRICT_CLIENT = `
import socket, ssl, sys, time
ctx = ssl.create_default_context(cafile=sys.argv[1])
for attempt in range(50):
    try:
        raw = socket.create_connection(("127.0.0.1", 443), timeout=10)
        break
    except ConnectionRefusedError:
        time.sleep(0.1)
conn = ctx.wrap_socket(raw, server_hostname="pkgs.tailscale.com", suppress_ragged_eofs=False)
conn.sendall(b"GET /stable/debian/probe HTTP/1.1\\r\\nHost: pkgs.tailscale.com\\r\\n\\r\\n")
data = b""
try:
    while True:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
except ssl.SSLEOFError as err:
    print("ragged:", err)
    sys.exit(1)
print("closed cleanly:", data.split(b"\\r\\n")[0].decode(), data.endswith(b"probe-body\\n"))
`;

describe.runIf(canRun)("the twin mirror's HTTPS", () => {
    it("ends every response with close_notify, as a TLS server does (apt 3.0 refuses one without it)", () => {
        const dir = tempDir("mirror-tls");
        for (const sub of ["root/stable/debian", "b2"]) fs.mkdirSync(path.join(dir, sub), { recursive: true });
        fs.writeFileSync(path.join(dir, "root/stable/debian/probe"), "probe-body\n");
        const key = path.join(dir, "key.pem");
        const cert = path.join(dir, "cert.pem");
        const made = spawnSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert, "-subj", "/CN=pkgs.tailscale.com", "-addext", "subjectAltName=DNS:pkgs.tailscale.com", "-days", "1"], { encoding: "utf8" });
        expect(made.status, made.stderr).toBe(0);
        fs.writeFileSync(path.join(dir, "client.py"), STRICT_CLIENT);
        const server = [path.join(TWIN_SOURCES, "mirror", "serve.py"), "--root", path.join(dir, "root"), "--b2-root", path.join(dir, "b2"), "--address", "127.0.0.1", "--cert", cert, "--key", key, "--log", path.join(dir, "log")];
        const script = `ip link set lo up; python3 ${server.join(" ")} & python3 ${dir}/client.py ${cert}; status=$?; kill %1; exit $status`;
        const ran = spawnSync("unshare", ["--net", "bash", "-c", script], { encoding: "utf8", timeout: 60_000 });
        expect(ran.stdout.trim(), ran.stderr).toBe("closed cleanly: HTTP/1.0 200 OK True");
        expect(ran.status).toBe(0);
    });
});
