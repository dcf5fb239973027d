import * as pulumi from "@pulumi/pulumi";
import { configFromPulumiRuntime, ConfigError } from "./components/config/load";
import { existingBreakGlassKeyId } from "./components/breakGlassKey";
import { Deployment } from "./components/deployment";
import { joinGeneration } from "./components/joinGeneration";

/**
 * The airlock program: stack config (validated by one zod schema) -> one Deployment.
 * Exported as a function so Pulumi runs it, and `airlock plan` runs the very same
 * code under mocks, once per stack, in one process.
 */
export = async () => {
    let config;
    try {
        config = configFromPulumiRuntime(pulumi.runtime.allConfig(), pulumi.getStack());
    } catch (err) {
        // One line per problem, no stack trace.
        if (err instanceof ConfigError) throw new pulumi.RunError(err.message);
        throw err;
    }
    const deployment = new Deployment(config.prefix, {
        config,
        existingBreakGlassKeyId: await existingBreakGlassKeyId(config.breakGlassSshPublicKey, config.prefix),
        joinGenerations: {
            gateway: await joinGeneration(config.prefix, "gateway", config.hostnames.gateway),
            sandbox: await joinGeneration(config.prefix, "sandbox", config.hostnames.sandbox),
        },
    });
    return {
        gatewayHostname: deployment.gateway.hostname,
        sandboxHostname: deployment.sandbox.hostname,
        gatewayTag: config.tailnet.gatewayTag,
        sandboxTag: config.tailnet.sandboxTag,
        // Merge this into the tailnet policy file when airlock:tailnet.manageAcl is false.
        tailnetPolicy: deployment.tailnet.policyText,
        // What the gateway's /etc/airlock/backup/*.env need (secret; see README "Backups").
        backupCredentials: pulumi.secret(
            pulumi.output(
                Object.fromEntries(
                    Object.entries(deployment.backups).map(([machine, b]) => [
                        machine,
                        { repository: pulumi.interpolate`b2:${b.bucketName}:/`, keyId: b.hostKeyId, key: b.hostKey },
                    ]),
                ),
            ),
        ),
        // Only when airlock:backup.pruneKey is true; it never reaches a host.
        ...(config.backup.pruneKey
            ? { pruneKeys: pulumi.secret(pulumi.output(Object.fromEntries(Object.entries(deployment.backups).map(([m, b]) => [m, { keyId: b.pruneKeyId, key: b.pruneKey }])))) }
            : {}),
    };
};
