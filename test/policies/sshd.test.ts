import { describe, expect, it } from "vitest";
import { readStackFile } from "../../components/config/load";
import { SSHD_TEMPLATE_PATH } from "../../components/render/hosts";
import { stackFile, renderHosts, renderedFile } from "../helpers/stacks";
import { ruleIds, sshd } from "./helpers";

const cfg = readStackFile(stackFile("dev"));
const sandboxConfig = renderedFile(renderHosts(cfg).sandbox, SSHD_TEMPLATE_PATH);
const gatewayConfig = renderedFile(renderHosts(cfg).gateway, SSHD_TEMPLATE_PATH);

/** Insert lines at the top (they win: first value) or before the Match block. */
const atTop = (line: string, text = sandboxConfig) => `${line}\n${text}`;
const replace = (from: RegExp, to: string, text = sandboxConfig) => {
    if (!from.test(text)) throw new Error(`fixture has no ${from}`);
    return text.replace(from, to);
};

describe("sshd rules", () => {
    it.each([["sandbox", sandboxConfig], ["gateway", gatewayConfig]])("airlock's rendered %s config passes", (_, text) => {
        expect(sshd(text)).toEqual([]);
    });

    it.each<[string, string, string]>([
        ["no ListenAddress", replace(/^ListenAddress .*$/m, ""), "sshd-listen-tailnet-only"],
        ["ListenAddress 0.0.0.0", atTop("ListenAddress 0.0.0.0"), "sshd-listen-tailnet-only"],
        ["an extra public ListenAddress", replace(/^(ListenAddress .*)$/m, "$1\nListenAddress 203.0.113.4:22"), "sshd-listen-tailnet-only"],
        ["ListenAddress [::]:22", atTop("ListenAddress [::]:22"), "sshd-listen-tailnet-only"],
        ["PasswordAuthentication yes first", atTop("PasswordAuthentication yes"), "sshd-no-password-auth"],
        ["passwordauthentication=yes (case, =)", atTop("passwordauthentication=yes"), "sshd-no-password-auth"],
        ["ChallengeResponseAuthentication yes", atTop("ChallengeResponseAuthentication yes"), "sshd-no-password-auth"],
        ["KbdInteractiveAuthentication missing", replace(/^KbdInteractiveAuthentication no$/m, ""), "sshd-no-password-auth"],
        ["password auth in a Match block", `${sandboxConfig}\nMatch Address 10.0.0.0/8\n\tPasswordAuthentication yes\n`, "sshd-no-password-auth"],
        ["PermitRootLogin prohibit-password", replace(/^PermitRootLogin no$/m, "PermitRootLogin prohibit-password"), "sshd-no-root-login"],
        ["PermitRootLogin missing", replace(/^PermitRootLogin no$/m, ""), "sshd-no-root-login"],
        ["no ForceCommand for the agent", replace(/^\tForceCommand .*$/m, ""), "sshd-agent-force-command"],
        ["ForceCommand none", replace(/^\tForceCommand .*$/m, "\tForceCommand none"), "sshd-agent-force-command"],
        ["ForceCommand for another user", replace(/^Match User agent$/m, "Match User someone"), "sshd-agent-force-command"],
        ["DisableForwarding no with TCP forwarding on", replace(/^AllowTcpForwarding no$/m, "AllowTcpForwarding yes", replace(/^DisableForwarding yes$/m, "DisableForwarding no")), "sshd-forwarding-disabled"],
        ["forwarding re-enabled in a Match", `${sandboxConfig}\tDisableForwarding no\n\tAllowTcpForwarding yes\n`, "sshd-forwarding-disabled"],
        ["PermitTunnel yes", atTop("PermitTunnel yes"), "sshd-no-tunnel"],
        ["PermitTunnel in a Match", `${sandboxConfig}\tPermitTunnel point-to-point\n`, "sshd-no-tunnel"],
        ["X11Forwarding yes", atTop("X11Forwarding yes"), "sshd-no-x11-forwarding"],
        ["PermitUserEnvironment yes", atTop("PermitUserEnvironment yes"), "sshd-no-user-environment"],
        ["AcceptEnv LANG LC_*", atTop("AcceptEnv LANG LC_*"), "sshd-accept-env-allowlist"],
        ["AcceptEnv LD_PRELOAD", atTop("AcceptEnv LD_PRELOAD"), "sshd-accept-env-allowlist"],
        ["AcceptEnv BASH_ENV", atTop("AcceptEnv BASH_ENV"), "sshd-accept-env-allowlist"],
        ["AcceptEnv of a name off the allowlist", atTop("AcceptEnv NPM_TOKEN"), "sshd-accept-env-allowlist"],
        ["AcceptEnv in a Match block", `${sandboxConfig}\tAcceptEnv PATH\n`, "sshd-accept-env-allowlist"],
        ["an Include", atTop("Include /etc/ssh/sshd_config.d/*.conf"), "sshd-parses"],
    ])("%s", (_, text, rule) => {
        const findings = sshd(text);
        expect(ruleIds(findings)).toEqual([rule]);
    });

    it("X11Forwarding yes alone breaks both the forwarding and the X11 rule only when DisableForwarding is off", () => {
        expect(ruleIds(sshd(atTop("X11Forwarding yes")))).toEqual(["sshd-no-x11-forwarding"]);
    });

    it("first value wins: a loosening line AFTER the hardened one is harmless", () => {
        const loosened = replace(/^(Match User agent)$/m, "PasswordAuthentication yes\nPermitRootLogin yes\nX11Forwarding yes\nPermitTunnel yes\n$1");
        expect(sshd(loosened)).toEqual([]);
    });

    it("every forwarding keyword off (without DisableForwarding) passes", () => {
        const text = replace(/^DisableForwarding yes$/m, "");
        expect(sshd(text)).toEqual([]);
        expect(ruleIds(sshd(replace(/^AllowAgentForwarding no$/m, "", text)))).toEqual(["sshd-forwarding-disabled"]);
    });

    it("findings carry the line of the offending keyword", () => {
        const finding = sshd(atTop("PermitTunnel yes"))[0];
        expect(finding.line).toBe(1);
        expect(finding.where).toBe("PermitTunnel");
    });

    it("the gateway config passes the agent rule because the agent cannot log in there", () => {
        expect(gatewayConfig).not.toMatch(/ForceCommand/);
        expect(ruleIds(sshd(gatewayConfig.replace(/^AllowUsers .*$/m, "AllowUsers ops agent")))).toEqual(["sshd-agent-force-command"]);
    });
});
