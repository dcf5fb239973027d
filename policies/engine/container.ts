import * as path from "node:path";
import { containsUnknown, Problem, unverifiable } from "./finding";
import { interpolate, interpolateDeep, splitOutsideBraces } from "./interpolate";

/**
 * One container, whatever described it (a compose service or a
 * `docker:index/container:Container`), in the terms the container rules speak.
 */
export interface ContainerSpec {
    name: string;
    origin: "compose" | "docker:Container";
    /** Line of the service in its compose file, where known. */
    line?: number;
    /** Where a compose service writes its keys (by compose path: `privileged`, `deploy.resources.limits.pids`) and each list entry. */
    source?: { keys: Record<string, number>; entries: Partial<Record<ListField, (number | undefined)[]>> };
    /** Unknown values are kept as Pulumi's unknown sentinel; rules report them as unverifiable. */
    image?: unknown;
    capDrop: string[];
    capAdd: string[];
    privileged: boolean;
    securityOpt: string[];
    /** namespace ("network", "pid", ...) -> mode ("host", "private", ...). */
    namespaces: Record<string, string>;
    devices: string[];
    mounts: Mount[];
    ports: PortBinding[];
    pidsLimit?: unknown;
    memoryLimit?: unknown;
    /** The environment it is started with (NAME -> value; a name without a value maps to undefined). */
    environment: Record<string, string | undefined>;
    /** What it runs: entrypoint then command, as written (undefined where the image decides). */
    entrypoint?: string[];
    command?: string[];
    /**
     * The content of bind-mounted files known beside it (the host files of the same
     * user_data), by host path: what a rule may read of a mounted configuration file.
     */
    hostFiles?: Record<string, string>;
    /** The properties above whose source values are (or contain) unknowns at preview. */
    unknown: Set<ContainerField>;
}

type ListField = "capAdd" | "securityOpt" | "devices";

/** The line of the first compose key of `c` that is written (`lineAt(c, "pids_limit", "deploy.resources.limits.pids")`), else the service's. */
export function lineAt(c: ContainerSpec, ...keys: string[]): number | undefined {
    for (const key of keys) if (c.source?.keys[key] !== undefined) return c.source.keys[key];
    return c.line;
}

/** The line of entry `index` of a list property (a cap_add entry, a device), else its key's, else the service's. */
export function entryLine(c: ContainerSpec, field: ListField, index: number): number | undefined {
    return c.source?.entries[field]?.[index] ?? c.line;
}

export type ContainerField =
    | "image" | "capDrop" | "capAdd" | "privileged" | "securityOpt" | "namespaces" | "devices" | "mounts" | "ports" | "pidsLimit" | "memoryLimit"
    | "environment" | "entrypoint" | "command";

/** Which source keys feed which property, so an unknown key makes exactly those rules unverifiable. */
const COMPOSE_FIELDS: Record<string, ContainerField[]> = {
    image: ["image"], cap_drop: ["capDrop"], cap_add: ["capAdd"], privileged: ["privileged"], security_opt: ["securityOpt"],
    network_mode: ["namespaces"], pid: ["namespaces"], ipc: ["namespaces"], userns_mode: ["namespaces"], uts: ["namespaces"], cgroup: ["namespaces"],
    devices: ["devices"], device_cgroup_rules: ["devices"], volumes: ["mounts"], ports: ["ports"],
    pids_limit: ["pidsLimit"], mem_limit: ["memoryLimit"], deploy: ["pidsLimit", "memoryLimit"],
    environment: ["environment"], env_file: ["environment"], entrypoint: ["entrypoint"], command: ["command"],
};
const DOCKER_FIELDS: Record<string, ContainerField[]> = {
    image: ["image"], capabilities: ["capDrop", "capAdd"], privileged: ["privileged"], securityOpts: ["securityOpt"],
    networkMode: ["namespaces"], pidMode: ["namespaces"], ipcMode: ["namespaces"], usernsMode: ["namespaces"], utsMode: ["namespaces"], cgroupnsMode: ["namespaces"],
    devices: ["devices"], volumes: ["mounts"], mounts: ["mounts"], ports: ["ports"], memory: ["memoryLimit"],
    envs: ["environment"], entrypoints: ["entrypoint"], command: ["command"],
};

function unknownFieldsOf(source: Record<string, unknown>, fields: Record<string, ContainerField[]>): Set<ContainerField> {
    return new Set(Object.entries(source).flatMap(([key, value]) => (containsUnknown(value) ? (fields[key] ?? []) : [])));
}

/** Runs `check` only when every field it reads is known; otherwise the rule fails closed. */
export function whenKnown(c: ContainerSpec, fields: ContainerField[], check: () => Problem[]): Problem[] {
    const unknown = fields.filter((f) => c.unknown.has(f));
    return unknown.length > 0 ? [{ ...unverifiable(`${unknown.join(", ")} of ${c.name}`, c.name), ...(c.line ? { line: c.line } : {}) }] : check();
}

export interface Mount {
    /** Host path for binds (may contain variables), volume name for volumes. */
    source?: string;
    target: string;
    type: "bind" | "volume" | "tmpfs" | "other";
    /** The source is final text (variables already resolved, `$$` already a dollar): nothing in it is a variable. */
    literal?: boolean;
    /** Mounted read-only (`:ro`, `read_only: true`). */
    readOnly?: boolean;
    /** Where the entry is written, where known. */
    line?: number;
}

export interface PortBinding {
    hostIp?: string;
    published?: string;
    target: string;
    /** The declaration as written, for messages. */
    text: string;
    /** Where the entry is written, where known. */
    line?: number;
}

const asStrings = (value: unknown): string[] => (Array.isArray(value) ? value.map(String) : value === undefined || value === null ? [] : [String(value)]);

export const normalizeCapability = (cap: string) => cap.trim().toUpperCase().replace(/^CAP_/, "");

/** A security_opt entry as Docker reads it: spaces dropped, case folded. */
export const normalizeSecurityOpt = (opt: string) => opt.replace(/\s/g, "").toLowerCase();

/** One problem per security_opt entry that `pattern` matches (normalized); fails closed while they are unknown. */
export function securityOptsMatching(c: ContainerSpec, pattern: RegExp): Problem[] {
    return whenKnown(c, ["securityOpt"], () =>
        c.securityOpt.flatMap((o, i) => (pattern.test(normalizeSecurityOpt(o)) ? [{ message: `${c.name} sets security_opt ${o}`, line: entryLine(c, "securityOpt", i), where: c.name }] : [])),
    );
}

/** What Compose reads as true in a boolean field: YAML 1.1's yes/on as well (`privileged: yes`). */
const truthy = (value: unknown) => value === true || /^(true|yes|on|y)$/i.test(String(value ?? ""));

/** Top-level named volumes: name -> definition (driver, driver_opts). */
export type NamedVolumes = Record<string, any>;

/**
 * A compose service (already merged with what it extends) -> ContainerSpec. Values
 * are judged with their variables unset: `${VAR:-default}` is its default, and a
 * variable without one makes the property unknown (the rules that read it fail closed).
 */
export function fromComposeService(
    name: string,
    raw: Record<string, any>,
    line?: number,
    namedVolumes: NamedVolumes = {},
    hostFiles?: Record<string, string>,
    lines: Record<string, number> = {},
): ContainerSpec {
    const unknown = unknownFieldsOf(raw, COMPOSE_FIELDS);
    const service: Record<string, any> = {};
    for (const [key, value] of Object.entries(raw)) {
        // Short volume and port syntax is split before it is interpolated (a default may hold a colon).
        if (key === "volumes" || key === "ports") {
            service[key] = value;
            continue;
        }
        const resolved = interpolateDeep(value);
        service[key] = resolved.value;
        if (resolved.unknown) for (const field of COMPOSE_FIELDS[key] ?? []) unknown.add(field);
    }
    const limits = service.deploy?.resources?.limits ?? {};
    // An entry's line, else its key's (a scalar where a list may be), else the service's.
    const at = (key: string, i: number) => lines[`${key}.${i}`] ?? lines[key] ?? line;
    const listLines = (key: string, value: unknown) => asStrings(value).map((_, i) => at(key, i));
    const devicesList = Array.isArray(service.devices) ? service.devices : service.devices === undefined || service.devices === null ? [] : [service.devices];
    return {
        name,
        origin: "compose",
        line,
        source: {
            keys: lines,
            entries: {
                capAdd: listLines("cap_add", service.cap_add),
                securityOpt: listLines("security_opt", service.security_opt),
                devices: [...devicesList.map((_: unknown, i: number) => at("devices", i)), ...listLines("device_cgroup_rules", service.device_cgroup_rules)],
            },
        },
        image: service.image,
        capDrop: asStrings(service.cap_drop).map(normalizeCapability),
        capAdd: asStrings(service.cap_add).map(normalizeCapability),
        privileged: truthy(service.privileged),
        securityOpt: asStrings(service.security_opt),
        namespaces: {
            network: String(service.network_mode ?? ""),
            pid: String(service.pid ?? ""),
            ipc: String(service.ipc ?? ""),
            userns: String(service.userns_mode ?? ""),
            uts: String(service.uts ?? ""),
            cgroup: String(service.cgroup ?? ""),
        },
        devices: [
            ...devicesList.map((d: unknown) => (typeof d === "string" ? d : JSON.stringify(d))),
            ...asStrings(service.device_cgroup_rules),
        ],
        mounts: (Array.isArray(service.volumes) ? service.volumes : []).map((v: unknown, i: number) => ({ ...composeMount(v, namedVolumes), line: at("volumes", i) })),
        ports: (Array.isArray(service.ports) ? service.ports : []).map((p: unknown, i: number) => ({ ...composePort(p), line: at("ports", i) })),
        pidsLimit: service.pids_limit ?? limits.pids,
        memoryLimit: service.mem_limit ?? limits.memory,
        environment: composeEnvironment(service.environment),
        entrypoint: commandLine(service.entrypoint),
        command: commandLine(service.command),
        ...(hostFiles ? { hostFiles } : {}),
        unknown,
    };
}

/** `environment:` as a map or a list of NAME[=value]. */
function composeEnvironment(environment: unknown): Record<string, string | undefined> {
    if (Array.isArray(environment)) {
        return Object.fromEntries(environment.map(String).map((entry) => (entry.includes("=") ? [entry.slice(0, entry.indexOf("=")), entry.slice(entry.indexOf("=") + 1)] : [entry, undefined])));
    }
    if (environment !== null && typeof environment === "object") {
        return Object.fromEntries(Object.entries(environment).map(([name, value]) => [name, value === null || value === undefined ? undefined : String(value)]));
    }
    return {};
}

/** `command:`/`entrypoint:` as a list, or a string split as compose splits it (on blanks; no quoting is judged). */
function commandLine(value: unknown): string[] | undefined {
    if (Array.isArray(value)) return value.map(String);
    if (typeof value === "string") return value.trim().split(/\s+/).filter(Boolean);
    return undefined;
}

/** A part of a short-syntax value: its default when it has one, else as written (so `$VAR` stays visible). */
function resolvedPart(part: string): string {
    const resolved = interpolate(part);
    return resolved.unknown ? part : resolved.value;
}

/** Whether a short-syntax part has no variable left to resolve. */
const isLiteral = (part: string) => !interpolate(part).unknown;

function composeMount(volume: unknown, namedVolumes: NamedVolumes): Mount {
    let mount: Mount;
    if (typeof volume === "string") {
        // SOURCE:TARGET[:MODE] or TARGET; a source that looks like a path is a bind mount.
        const raw = splitOutsideBraces(volume, ":");
        const parts = raw.map(resolvedPart);
        if (parts.length === 1) return { target: parts[0], type: "volume" };
        const [source, target] = parts;
        const literal = isLiteral(raw[0]);
        const isPath = literal ? /^[./~]/.test(source) : /^([./~]|\$)/.test(source);
        const readOnly = (parts[2] ?? "").split(",").includes("ro");
        mount = { source, target, type: isPath ? "bind" : "volume", literal, readOnly };
    } else {
        const long = interpolateDeep(volume ?? {}).value as { type?: string; source?: string; target?: string; read_only?: unknown };
        const type = long.type === "bind" || long.type === "volume" || long.type === "tmpfs" ? long.type : "other";
        const literal = typeof (volume as { source?: unknown })?.source !== "string" || isLiteral((volume as { source: string }).source);
        mount = { source: long.source === undefined ? undefined : String(long.source), target: String(long.target ?? ""), type, literal, readOnly: truthy(long.read_only) };
    }
    return mount.type === "volume" && mount.source ? throughNamedVolume(mount, namedVolumes) : mount;
}

/**
 * A named volume whose local driver bind-mounts a host directory
 * (`driver_opts: {type: none, o: bind, device: /var/run}`) is that bind mount.
 */
function throughNamedVolume(mount: Mount, namedVolumes: NamedVolumes): Mount {
    const definition = namedVolumes[mount.source!];
    const opts = interpolateDeep(definition?.driver_opts ?? {}).value as Record<string, unknown>;
    const options = String(opts.o ?? "").split(",").map((o) => o.trim());
    if (!options.includes("bind") && !options.includes("rbind")) return mount;
    return { source: String(opts.device ?? ""), target: mount.target, type: "bind", literal: true, readOnly: mount.readOnly };
}

function composePort(port: unknown): PortBinding {
    if (typeof port === "number") return { published: undefined, target: String(port), text: String(port) };
    if (typeof port === "string") {
        const spec = port.replace(/\/(tcp|udp|sctp)$/, "");
        const v6 = /^\[([^\]]+)\]:([^:]*):(.+)$/.exec(spec);
        if (v6) return { hostIp: v6[1], published: v6[2], target: v6[3], text: port };
        const parts = splitOutsideBraces(spec, ":").map(resolvedPart);
        if (parts.length >= 3) return { hostIp: parts.slice(0, -2).join(":"), published: parts[parts.length - 2], target: parts[parts.length - 1], text: port };
        if (parts.length === 2) return { published: parts[0], target: parts[1], text: port };
        return { target: parts[0], text: port };
    }
    const long = interpolateDeep(port ?? {}).value as { host_ip?: string; published?: unknown; target?: unknown };
    return {
        hostIp: long.host_ip,
        published: long.published === undefined ? undefined : String(long.published),
        target: String(long.target ?? ""),
        text: JSON.stringify(port),
    };
}

/** `docker:index/container:Container` inputs -> ContainerSpec. It has no pids limit, by design of the provider. */
export function fromDockerContainer(name: string, inputs: Record<string, any>): ContainerSpec {
    const mounts: Mount[] = [
        ...(Array.isArray(inputs.volumes) ? inputs.volumes : []).map((v: any) =>
            v.hostPath
                ? { source: v.hostPath, target: String(v.containerPath ?? ""), type: "bind" as const, readOnly: v.readOnly === true }
                : { source: v.volumeName, target: String(v.containerPath ?? ""), type: "volume" as const, readOnly: v.readOnly === true },
        ),
        ...(Array.isArray(inputs.mounts) ? inputs.mounts : []).map((m: any) => ({
            source: m.source,
            target: String(m.target ?? ""),
            type: m.type === "bind" || m.type === "volume" || m.type === "tmpfs" ? m.type : ("other" as const),
            readOnly: m.readOnly === true,
        })),
    ];
    return {
        name: String(inputs.name ?? name),
        origin: "docker:Container",
        image: inputs.image,
        capDrop: asStrings(inputs.capabilities?.drops).map(normalizeCapability),
        capAdd: asStrings(inputs.capabilities?.adds).map(normalizeCapability),
        privileged: inputs.privileged === true,
        securityOpt: asStrings(inputs.securityOpts),
        namespaces: {
            network: String(inputs.networkMode ?? ""),
            pid: String(inputs.pidMode ?? ""),
            ipc: String(inputs.ipcMode ?? ""),
            userns: String(inputs.usernsMode ?? ""),
            uts: String(inputs.utsMode ?? ""),
            cgroup: String(inputs.cgroupnsMode ?? ""),
        },
        devices: (Array.isArray(inputs.devices) ? inputs.devices : []).map((d: any) => String(d.hostPath ?? JSON.stringify(d))),
        mounts,
        ports: (Array.isArray(inputs.ports) ? inputs.ports : []).map((p: any) => ({
            // The provider's default ip is 0.0.0.0.
            hostIp: p.ip ?? "0.0.0.0",
            published: p.external === undefined ? undefined : String(p.external),
            target: String(p.internal ?? ""),
            text: JSON.stringify(p),
        })),
        pidsLimit: undefined,
        memoryLimit: inputs.memory,
        environment: composeEnvironment(Array.isArray(inputs.envs) ? inputs.envs : []),
        entrypoint: Array.isArray(inputs.entrypoints) ? inputs.entrypoints.map(String) : undefined,
        command: Array.isArray(inputs.command) ? inputs.command.map(String) : undefined,
        unknown: unknownFieldsOf(inputs, DOCKER_FIELDS),
    };
}

/**
 * A host path with `~`, `$HOME` and `$XDG_RUNTIME_DIR` expanded to the shapes they
 * take on a host (`/home/*`, `/run/user/*`); undefined when another variable makes it
 * unknowable, or when it is not a host path at all.
 */
export function hostPathOf(source: string | undefined, literal = false): string | undefined | "unknowable" {
    if (!source) return undefined;
    let p = source.replace(/^~(?=\/|$)/, "/home/*");
    if (!literal) {
        p = p.replace(/\$\{HOME\}|\$HOME\b/g, "/home/*").replace(/\$\{XDG_RUNTIME_DIR\}|\$XDG_RUNTIME_DIR\b/g, "/run/user/*");
        if (/\$/.test(p)) return "unknowable";
    }
    if (!p.startsWith("/")) return undefined; // relative to the compose file, or a named volume
    p = path.posix.normalize(p);
    return p.length > 1 ? p.replace(/\/$/, "") : p;
}

/** Each bind mount of the container with its host path (hostPathOf: "unknowable" when a variable decides it). */
export function hostBinds(c: ContainerSpec): { mount: Mount; host: string }[] {
    return c.mounts
        .filter((m) => m.type === "bind" || m.type === "other")
        .flatMap((mount) => {
            const host = hostPathOf(mount.source, mount.literal);
            return host === undefined ? [] : [{ mount, host }];
        });
}

/**
 * Whether a host path that a variable starts (`${CONFIG}/web`) could be `target` or one
 * of its parents, whatever the variable holds: only when the fixed segments after the
 * last variable can end a prefix of `target` (`${X}/run` could be /run; `${X}/web` is
 * never a parent of /run/docker.sock). Nothing fixed after it (`${X}`), or a variable
 * inside a segment, could be anything.
 */
export function couldCoverPath(source: string, target: string): boolean {
    const tail = /^(.*)(\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*)(.*)$/s.exec(source)?.[3] ?? source;
    if (!tail.startsWith("/")) return true;
    const fixed = tail.split("/").filter(Boolean);
    if (fixed.length === 0 || fixed.some((s) => s === ".." || s === ".")) return true;
    const run = target.replace(/^\/var\/run(?=\/|$)/, "/run").split("/").filter(Boolean);
    // /var/run is /run: a fixed part may name either.
    // In the targets `*` is a uid (/run/user/*/docker.sock).
    const same = (fixedSegment: string, targetSegment: string) => fixedSegment === targetSegment || (targetSegment === "*" && /^\d+$/.test(fixedSegment));
    for (const segments of run[0] === "run" ? [run, ["var", ...run]] : [run]) {
        for (let end = fixed.length; end <= segments.length; end++) {
            if (fixed.every((segment, i) => same(segment, segments[end - fixed.length + i]))) return true;
        }
    }
    return false;
}

/**
 * True when the host path `dir` is `target` or one of its parent directories
 * (`*` in either matches one path segment; /var/run is /run).
 */
export function coversPath(dir: string, target: string): boolean {
    const segments = (p: string) => p.replace(/^\/var\/run(?=\/|$)/, "/run").split("/").filter(Boolean);
    const a = segments(dir);
    const b = segments(target);
    return a.length <= b.length && a.every((segment, i) => segment === b[i] || segment === "*" || b[i] === "*");
}
