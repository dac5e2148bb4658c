import js from "@eslint/js";
import reactHooks from "eslint-plugin-react-hooks";
import tseslint from "typescript-eslint";

export default tseslint.config(
  {
    ignores: [
      "node_modules/",
      ".next/",
      ".data/",
      "next-env.d.ts",
      "test-results/",
      "playwright-report/",
      "data/",
      "scratch/",
    ],
  },
  js.configs.recommended,
  {
    files: ["**/*.mjs"],
    languageOptions: { globals: { process: "readonly", console: "readonly", setTimeout: "readonly" } },
  },
  ...tseslint.configs.recommended,
  {
    files: ["**/*.tsx"],
    plugins: { "react-hooks": reactHooks },
    rules: reactHooks.configs.recommended.rules,
  },
  {
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "no-restricted-imports": "off",
    },
  },
  {
    // One-way dependencies: the UI never talks to Redis or BullMQ directly.
    files: ["app/**/*.{ts,tsx}", "components/**/*.{ts,tsx}"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          paths: [
            { name: "ioredis", message: "app/ and components/ reach Redis only through lib/ functions" },
            { name: "bullmq", message: "app/ and components/ reach the queue only through lib/ functions" },
          ],
          patterns: [{ group: ["**/lib/redis/*", "@/lib/redis/*"], message: "use a lib/<domain> function instead" }],
        },
      ],
    },
  },
);
