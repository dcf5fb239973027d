/**
 * What the rules compare against. Its values come from the one policy file,
 * policies/config.json (see policies/policy.ts); a stack never sets them.
 */
export interface JudgeContext {
    /** The sandbox user every agent command runs as. */
    agentUser: string;
    /** The only variables sshd may accept and the wrapper may pass on. */
    envAllowlist: string[];
    /** Days a B2 bucket must keep hidden versions. */
    retentionDays: number;
}
