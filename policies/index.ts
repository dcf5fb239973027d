import { PolicyPack } from "@pulumi/policy";
import { airlockPolicies } from "./pack";

// `pulumi preview --policy-pack policies`; per-rule levels and context with
// `--policy-pack-config policies/config.example.json`.
new PolicyPack("airlock", { policies: airlockPolicies() });
