import * as pulumi from "@pulumi/pulumi";
import * as tailscale from "@pulumi/tailscale";
import { renderTailnetPolicy, TailnetPolicy, tailnetPolicyText } from "./render/tailnetPolicy";
import { artifactStash } from "./artifacts";

export interface TailnetArgs {
    gatewayTag: string;
    sandboxTag: string;
    tagOwners: string[];
    /** Who may reach the gateway's sshd (the operator login). */
    operators: string[];
    /**
     * `tailscale.Acl` replaces the tailnet's WHOLE policy file, so airlock manages it
     * only when asked (a tailnet dedicated to airlock). Otherwise the policy is only
     * rendered, for the operator to merge into their own.
     */
    manageAcl: boolean;
    /** Lifetime of the join keys, in seconds. */
    keyExpirySeconds: number;
}

export interface HostKeyArgs {
    tag: string;
    /** Ephemeral nodes vanish from the tailnet when the server goes away (cattle). */
    ephemeral: boolean;
    description: string;
    /** A new value replaces the key: what creates its server anew (Pulumi's replacementTrigger). */
    replacementTrigger: pulumi.Input<string>;
}

/** The private network: its policy, and the join keys for each host. */
export class Tailnet extends pulumi.ComponentResource {
    readonly policy: TailnetPolicy;
    readonly policyText: string;
    readonly acl?: tailscale.Acl;
    private readonly keyExpirySeconds: number;

    constructor(name: string, args: TailnetArgs, opts?: pulumi.ComponentResourceOptions) {
        super("airlock:index:Tailnet", name, {}, opts);
        this.keyExpirySeconds = args.keyExpirySeconds;
        this.policy = renderTailnetPolicy(args);
        this.policyText = tailnetPolicyText(this.policy);

        if (args.manageAcl) {
            this.acl = new tailscale.Acl(
                `${name}-policy`,
                // Never reset on destroy: Tailscale's default policy allows everything.
                { acl: this.policyText, overwriteExistingContent: true, resetAclOnDestroy: false },
                { parent: this },
            );
        }
        artifactStash(`${name}-artifacts`, { "policy.hujson": this.policyText }, this);

        this.registerOutputs({ policy: this.policyText, manageAcl: args.manageAcl });
    }

    /**
     * A join key for one host: single-use, pre-authorized, tagged, short-lived. A used
     * key is not recreated when it turns invalid (that would change user_data and
     * replace the server); it is replaced with its server, by its trigger.
     */
    joinKey(name: string, args: HostKeyArgs, parent: pulumi.Resource): tailscale.TailnetKey {
        return new tailscale.TailnetKey(
            name,
            {
                reusable: false,
                ephemeral: args.ephemeral,
                preauthorized: true,
                tags: [args.tag],
                expiry: this.keyExpirySeconds,
                recreateIfInvalid: "never",
                description: args.description,
            },
            // Tagged keys need the tags' owners in the policy first.
            { parent, dependsOn: this.acl ? [this.acl] : [], replacementTrigger: args.replacementTrigger },
        );
    }
}
