import type { Rule } from "../engine/rule";
import { agentRuntimeCommandsOnSandbox } from "./agent-runtime-commands-on-sandbox";
import { b2BucketsRetainHiddenVersions } from "./b2-buckets-retain-hidden-versions";
import { b2HostKeysLeastPrivilege } from "./b2-host-keys-least-privilege";
import { cloudInitNamedBundleJudged } from "./cloud-init-named-bundle-judged";
import { cloudInitNoPasswordlessSudoForAgent } from "./cloud-init-no-passwordless-sudo-for-agent";
import { cloudInitNoPasswords } from "./cloud-init-no-passwords";
import { cloudInitNoPipeToShell } from "./cloud-init-no-pipe-to-shell";
import { cloudInitNoSecrets } from "./cloud-init-no-secrets";
import { cloudInitNoTailscaleSsh } from "./cloud-init-no-tailscale-ssh";
import { cloudInitSshPasswordAuthOff } from "./cloud-init-ssh-password-auth-off";
import { cloudInitWithinHetznerUserDataLimit } from "./cloud-init-within-hetzner-user-data-limit";
import { containersAddOnlyAllowedCapabilities } from "./containers-add-only-allowed-capabilities";
import { containersBrowserNoWorkspace } from "./containers-browser-no-workspace";
import { containersDropAllCapabilities } from "./containers-drop-all-capabilities";
import { containersImagesPinnedByDigest } from "./containers-images-pinned-by-digest";
import { containersNoDevices } from "./containers-no-devices";
import { containersNoDockerSocket } from "./containers-no-docker-socket";
import { containersNoHostNamespaces } from "./containers-no-host-namespaces";
import { containersNoHostSecretMounts } from "./containers-no-host-secret-mounts";
import { containersNoHostSystemMounts } from "./containers-no-host-system-mounts";
import { containersNoNewPrivileges } from "./containers-no-new-privileges";
import { containersNoOwnSeccompProfile } from "./containers-no-own-seccomp-profile";
import { containersNoUnconfinedProfiles } from "./containers-no-unconfined-profiles";
import { containersNotPrivileged } from "./containers-not-privileged";
import { containersPortsPrivateOnly } from "./containers-ports-private-only";
import { containersResourceLimits } from "./containers-resource-limits";
import { hcloudFirewallNoPublicInboundTcp } from "./hcloud-firewall-no-public-inbound-tcp";
import { hcloudServersHaveFirewall } from "./hcloud-servers-have-firewall";
import { hcloudServersUserDataBundleJudged } from "./hcloud-servers-user-data-bundle-judged";
import { hcloudServersUserDataVerifiable } from "./hcloud-servers-user-data-verifiable";
import { sshdAcceptEnvAllowlist } from "./sshd-accept-env-allowlist";
import { sshdAgentForceCommand } from "./sshd-agent-force-command";
import { sshdForwardingDisabled } from "./sshd-forwarding-disabled";
import { sshdListenTailnetOnly } from "./sshd-listen-tailnet-only";
import { sshdNoPasswordAuth } from "./sshd-no-password-auth";
import { sshdNoRootLogin } from "./sshd-no-root-login";
import { sshdNoTunnel } from "./sshd-no-tunnel";
import { sshdNoUserEnvironment } from "./sshd-no-user-environment";
import { sshdNoX11Forwarding } from "./sshd-no-x11-forwarding";
import { stackAgentUserIsThePolicys } from "./stack-agent-user-is-the-policys";
import { stackSecretsEncrypted } from "./stack-secrets-encrypted";
import { tailnetAclNoWildcards } from "./tailnet-acl-no-wildcards";
import { tailscaleKeysSingleUse } from "./tailscale-keys-single-use";

/** Every rule, one per file in this folder. The pack, `airlock check` and `airlock gate` all use this list. */
export const RULES: Rule[] = [
    agentRuntimeCommandsOnSandbox,
    b2BucketsRetainHiddenVersions,
    b2HostKeysLeastPrivilege,
    cloudInitNamedBundleJudged,
    cloudInitNoPasswordlessSudoForAgent,
    cloudInitNoPasswords,
    cloudInitNoPipeToShell,
    cloudInitNoSecrets,
    cloudInitNoTailscaleSsh,
    cloudInitSshPasswordAuthOff,
    cloudInitWithinHetznerUserDataLimit,
    containersAddOnlyAllowedCapabilities,
    containersBrowserNoWorkspace,
    containersDropAllCapabilities,
    containersImagesPinnedByDigest,
    containersNoDevices,
    containersNoDockerSocket,
    containersNoHostNamespaces,
    containersNoHostSecretMounts,
    containersNoHostSystemMounts,
    containersNoNewPrivileges,
    containersNoOwnSeccompProfile,
    containersNoUnconfinedProfiles,
    containersNotPrivileged,
    containersPortsPrivateOnly,
    containersResourceLimits,
    hcloudFirewallNoPublicInboundTcp,
    hcloudServersHaveFirewall,
    hcloudServersUserDataBundleJudged,
    hcloudServersUserDataVerifiable,
    sshdAcceptEnvAllowlist,
    sshdAgentForceCommand,
    sshdForwardingDisabled,
    sshdListenTailnetOnly,
    sshdNoPasswordAuth,
    sshdNoRootLogin,
    sshdNoTunnel,
    sshdNoUserEnvironment,
    sshdNoX11Forwarding,
    stackAgentUserIsThePolicys,
    stackSecretsEncrypted,
    tailnetAclNoWildcards,
    tailscaleKeysSingleUse,
];
