/**
 * What the agent may be trusted with: GitHub App permissions (which are high-impact)
 * and the credential names that would let it deploy. The schema, the checklist and
 * `airlock secrets` read these; the gateway's token minter enforces the result.
 */

/** Repository permissions a GitHub App installation token can carry (REST "Create an installation access token"). */
export const GITHUB_REPOSITORY_PERMISSIONS = [
    "actions", "administration", "checks", "codespaces", "contents", "dependabot_secrets", "deployments", "environments",
    "issues", "metadata", "packages", "pages", "pull_requests", "repository_custom_properties", "repository_hooks",
    "repository_projects", "secret_scanning_alerts", "secrets", "security_events", "single_file", "statuses",
    "vulnerability_alerts", "workflows",
] as const;

export type GithubPermission = (typeof GITHUB_REPOSITORY_PERMISSIONS)[number];
export type GithubLevel = "read" | "write";

/**
 * Scopes that reach past the pull request a task opens: merging, repository
 * administration, workflows (which run with the repository's secrets), deploys.
 * A stack must allow each one explicitly (`github.allowHighImpact`); "name:*" covers both levels.
 */
export const GITHUB_HIGH_IMPACT: Record<string, string> = {
    "administration:*": "changes settings, branch protection and collaborators",
    "workflows:write": "edits workflow files, which run with the repository's secrets",
    "contents:write": "can merge pull requests and push to any unprotected branch",
    "actions:write": "dispatches and re-runs workflows (deploys)",
    "deployments:write": "creates deployments",
    "environments:write": "changes deployment environments and their protection",
    "secrets:write": "replaces Actions secrets",
    "dependabot_secrets:write": "replaces Dependabot secrets",
    "repository_hooks:write": "sends repository events to any URL",
    "packages:write": "publishes packages",
    "pages:write": "publishes the site",
};

/** The merge- and admin-capable subset (the checklist's "no merge or admin"). */
export const GITHUB_MERGE_OR_ADMIN = ["administration:*", "contents:write", "workflows:write"];

/** The high-impact entry that covers `name:level`, if any. */
export function highImpactEntry(name: string, level: string): string | undefined {
    return [`${name}:${level}`, `${name}:*`].find((key) => key in GITHUB_HIGH_IMPACT);
}

/** Does a list of scopes ("name:level" or "name:*") name `name:level`? */
export function scopeListed(list: readonly string[], name: string, level: string): boolean {
    return list.includes(`${name}:${level}`) || list.includes(`${name}:*`);
}

/** The agent secret that holds the GitHub App's private key; only the token minter (root) reads it. */
export const GITHUB_APP_KEY_SECRET = "GITHUB_APP_PRIVATE_KEY";

/**
 * Names of credentials that deploy or administer infrastructure, publish artifacts,
 * or outlive a task. The agent's runtime gets none of them: a task that needs
 * GitHub gets a scoped token per task instead.
 */
export const DEPLOY_CREDENTIAL_NAMES: [RegExp, string][] = [
    [/^(HCLOUD|HETZNER)_/, "Hetzner Cloud"],
    [/^(AWS|AMAZON)_/, "AWS"],
    [/^(AZURE|ARM)_/, "Azure"],
    [/^(GOOGLE_APPLICATION_CREDENTIALS|GOOGLE_CREDENTIALS|GCP_|GCLOUD_|CLOUDSDK_)/, "Google Cloud"],
    [/^(DIGITALOCEAN_|DO_TOKEN$)/, "DigitalOcean"],
    [/^CLOUDFLARE_/, "Cloudflare"],
    [/^(FLY_API_TOKEN|FLY_ACCESS_TOKEN)$/, "Fly.io"],
    [/^(VERCEL|NETLIFY|HEROKU|RENDER|RAILWAY)_/, "a hosting platform"],
    [/^(KUBECONFIG|KUBE_|K8S_)/, "Kubernetes"],
    [/^(PULUMI_ACCESS_TOKEN|PULUMI_CONFIG_PASSPHRASE|TF_TOKEN_|TFE_TOKEN|ATLAS_TOKEN)/, "infrastructure as code"],
    [/^(TAILSCALE_|TS_AUTHKEY$|TS_API_KEY$)/, "Tailscale"],
    [/^(B2_|RESTIC_)/, "backups"],
    [/^(VAULT_TOKEN|VAULT_ROLE_ID|VAULT_SECRET_ID)$/, "Vault"],
    [/^(NPM_TOKEN|NODE_AUTH_TOKEN|PYPI_|TWINE_|CARGO_REGISTRY_TOKEN|GEM_HOST_API_KEY|DOCKER_?HUB_|REGISTRY_PASSWORD|CR_PAT)/, "a package or image registry"],
    [/^(GITHUB_TOKEN|GH_TOKEN|GITHUB_PAT|GH_PAT|GITLAB_TOKEN|GL_TOKEN)$/, "a long-lived forge token (mint one per task instead)"],
];

/** Why a secret name is a deploy credential, or undefined. */
export function deployCredential(name: string): string | undefined {
    return DEPLOY_CREDENTIAL_NAMES.find(([pattern]) => pattern.test(name))?.[1];
}
