import { defineConfig } from "vitest/config";

export default defineConfig({
    test: {
        include: ["test/**/*.test.ts"],
        globalSetup: ["test/helpers/build.ts", "test/helpers/hostTools.ts"],
        // Pulumi's runtime state is process-global; plans in one file run in sequence.
        fileParallelism: true,
        pool: "forks",
        testTimeout: 60_000,
        hookTimeout: 120_000,
    },
});
