import { AIRLOCK_ONLY } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { lineAt, whenKnown } from "../engine/container";
import { BUILT_SANDBOX_SHELL_PLACEHOLDER } from "../contract";

const PINNED = /@sha256:[0-9a-f]{64}$/;

export const containersImagesPinnedByDigest: Rule = {
    kind: "container",
    id: "containers-images-pinned-by-digest",
    profiles: AIRLOCK_ONLY,
    description:
        "Every image is pinned by digest (name@sha256:...), so what was reviewed is what runs; a tag, :latest or no tag fails. " +
        `${BUILT_SANDBOX_SHELL_PLACEHOLDER} passes: airlock fills it at deploy with the built image's digest-pinned reference and refuses anything else.`,
    remediation: "Pin the image: `docker buildx imagetools inspect <image>:<tag>` gives the digest; write `<image>:<tag>@sha256:<digest>`.",
    check: (c) =>
        whenKnown(c, ["image"], () => {
            if (typeof c.image !== "string" || c.image === "") return [{ message: `${c.name} has no image (a local build is not pinned)`, line: lineAt(c, "image", "build"), where: c.name }];
            if (PINNED.test(c.image) || c.image === BUILT_SANDBOX_SHELL_PLACEHOLDER) return [];
            const reference = c.image.replace(/@.*$/, "");
            return [
                {
                    message: `${c.name} image ${c.image} is not pinned by digest`,
                    line: lineAt(c, "image"),
                    where: c.name,
                    fix: `Pin it: \`docker buildx imagetools inspect ${reference}\` prints the digest; write image: ${reference}@sha256:<that digest>.`,
                },
            ];
        }),
};
