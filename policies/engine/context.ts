/** What the rules need to know about the deployment they judge. */
export interface JudgeContext {
    /** The sandbox user every agent command runs as. */
    agentUser: string;
    /** The only variables sshd may accept and the wrapper may pass on. */
    envAllowlist: string[];
    /** Days a B2 bucket must keep hidden versions. */
    retentionDays: number;
}

export const DEFAULT_CONTEXT: JudgeContext = { agentUser: "agent", envAllowlist: ["GITHUB_TOKEN"], retentionDays: 30 };
