import { PolicyPack } from "@pulumi/policy";
import { airlockPolicies } from "./pack";

// `pulumi preview --policy-pack policies [--policy-pack-config policies/config.json]`:
// levels and thresholds come from policies/config.json either way.
new PolicyPack("airlock", { policies: airlockPolicies() });
