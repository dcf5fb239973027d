"use strict";
/**
 * airlock twin: Hetzner's metadata service stand-in, on 169.254.169.254:80 in the
 * twin's namespace. Like Hetzner's, it answers each server about itself: the
 * guest is known by its address. Serves, from <dir>/<guest address>/:
 *   /hetzner/v1/metadata                   metadata.yaml
 *   /hetzner/v1/metadata/<key>             one key of it (a scalar as text, else YAML)
 *   /hetzner/v1/metadata/private-networks  private-networks.yaml (the twin has none: [])
 *   /hetzner/v1/userdata                   userdata
 * Every request is logged (the suite checks what the agent could not reach).
 * Usage: node server.js <dir> <address> [port]
 */
const fs = require("node:fs");
const http = require("node:http");
const path = require("node:path");
const YAML = require("yaml");

const [dir, address, port = "80"] = process.argv.slice(2);
if (!dir || !address) {
    process.stderr.write("usage: server.js <dir> <address> [port]\n");
    process.exit(2);
}

function read(guest, file) {
    try {
        return fs.readFileSync(path.join(dir, guest, file), "utf8");
    } catch {
        return undefined;
    }
}

function answer(guest, url) {
    const prefix = "/hetzner/v1/";
    if (!url.startsWith(prefix)) return undefined;
    const rest = url.slice(prefix.length).replace(/\/+$/, "");
    if (rest === "userdata") return read(guest, "userdata");
    if (rest === "metadata") return read(guest, "metadata.yaml");
    if (rest === "metadata/private-networks") return read(guest, "private-networks.yaml") ?? "[]\n";
    const key = /^metadata\/([A-Za-z0-9_-]+)$/.exec(rest)?.[1];
    const text = key ? read(guest, "metadata.yaml") : undefined;
    if (text === undefined) return undefined;
    const value = YAML.parse(text)[key];
    if (value === undefined) return undefined;
    return value !== null && typeof value === "object" ? YAML.stringify(value) : String(value);
}

const server = http.createServer((req, res) => {
    // "::ffff:10.77.0.10" -> "10.77.0.10"
    const guest = (req.socket.remoteAddress ?? "").replace(/^::ffff:/, "");
    const body = req.method === "GET" && /^[0-9.]+$/.test(guest) ? answer(guest, (req.url ?? "").split("?")[0]) : undefined;
    process.stdout.write(`${new Date().toISOString()} ${guest} ${req.method} ${req.url} ${body === undefined ? 404 : 200}\n`);
    if (body === undefined) {
        res.writeHead(404, { "content-type": "text/plain" });
        res.end("not found\n");
        return;
    }
    res.writeHead(200, { "content-type": "text/plain; charset=utf-8" });
    res.end(body);
});
server.listen(Number(port), address, () => process.stdout.write(`listening on ${address}:${port}\n`));
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => server.close(() => process.exit(0)));
