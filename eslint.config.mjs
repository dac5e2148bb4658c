import js from "@eslint/js";
import reactHooks from "eslint-plugin-react-hooks";
import tseslint from "typescript-eslint";

/**
 * Layering, checked here so a back-edge fails `npm test` (STYLE.md 8, 15). Each entry: the files
 * of a layer and the import paths (gitignore-style, relative or `@/`) they must not use.
 * Dependencies point one way: components/ → app/ → lib/api, lib/web → lib/<domain> → lib/redis;
 * worker/ → lib/<domain>. Run records are written only by lib/runs (its scripts stay inside).
 */
const LIB_BASE = ["**/app/**", "**/components/**", "@/app/**", "@/components/**", "**/worker/**"];
/** Only lib/runs writes run records: its scripts are not imported elsewhere (tests may, to test them). */
const RUN_SCRIPTS = ["**/runs/scripts"];
const DOMAINS = ["claims", "runs", "rebuilds", "api", "web", "auth", "health", "workers", "audit"];
/** Directories with a layer rule of their own (flat config keeps only the last rule per file, so layers must not overlap). */
const OWN_RULES = ["redis", "auth", "health", "runs", "claims"];
const LAYERS = [
  {
    files: ["lib/**/*.ts"],
    ignores: OWN_RULES.map((dir) => `lib/${dir}/**`),
    forbid: [...LIB_BASE, ...RUN_SCRIPTS],
    why: "lib/ never imports the UI or the worker; only lib/runs writes run records",
  },
  {
    files: ["lib/redis/**/*.ts"],
    forbid: [...LIB_BASE, ...DOMAINS.flatMap((d) => [`../${d}`, `../${d}/**`])],
    why: "lib/redis is the bottom layer: domains use it, never the reverse",
  },
  {
    files: ["lib/auth/**/*.ts"],
    forbid: [...LIB_BASE, ...RUN_SCRIPTS, "../api", "../api/**"],
    why: "lib/auth is below lib/api (a shared piece moves down, e.g. lib/http/errors)",
  },
  {
    files: ["lib/health/**/*.ts"],
    forbid: [...LIB_BASE, ...RUN_SCRIPTS, "../web", "../web/**", "../api", "../api/**"],
    why: "lib/health is below lib/web and lib/api (the web's report is lib/web/health-report)",
  },
  {
    files: ["lib/runs/**/*.ts"],
    forbid: [...LIB_BASE, ...["rebuilds", "claims", "api", "web"].flatMap((d) => [`../${d}`, `../${d}/**`])],
    why: "run records are below the rebuilds that write them",
  },
  {
    files: ["lib/claims/**/*.ts"],
    forbid: [
      ...LIB_BASE,
      ...RUN_SCRIPTS,
      ...["rebuilds", "runs", "api", "web"].flatMap((d) => [`../${d}`, `../${d}/**`]),
    ],
    why: "claims are below the rebuilds that take them",
  },
  {
    files: ["worker/**/*.ts"],
    forbid: [
      ...RUN_SCRIPTS,
      "**/lib/health/**",
      "**/lib/web/**",
      "**/lib/api/**",
      "**/lib/ui/**",
      "next",
      "next/**",
      "react",
    ],
    why: "the worker uses domain modules only",
  },
  {
    files: ["cli/**/*.ts"],
    forbid: [...LIB_BASE, ...RUN_SCRIPTS, "next", "next/**", "react"],
    why: "the CLI is an edge like a route handler: it calls lib/ functions only",
  },
  {
    files: ["bench/**/*.ts", "scripts/**/*.ts"],
    forbid: RUN_SCRIPTS,
    why: "only lib/runs writes run records (use lib/runs/writer)",
  },
];

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
    languageOptions: {
      globals: {
        process: "readonly",
        console: "readonly",
        setTimeout: "readonly",
        setInterval: "readonly",
        performance: "readonly",
        Buffer: "readonly",
      },
    },
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
  ...LAYERS.map(({ files, ignores, forbid, why }) => ({
    files,
    ...(ignores ? { ignores } : {}),
    rules: { "no-restricted-imports": ["error", { patterns: [{ group: forbid, message: why }] }] },
  })),
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
      // A mutation re-reads what it changed (`rereadChanged`), not every query on screen.
      "no-restricted-syntax": [
        "error",
        {
          selector: "MemberExpression[object.name='queryKeys'][property.name='all']",
          message: "re-read what the action changed: rereadChanged(client, …) or a narrower queryKeys.<domain> key",
        },
      ],
    },
  },
);
