/**
 * Process configuration, read from the environment once at start-up by the launcher, the web
 * server and the worker. A bad value is reported as one line naming the variable; callers at
 * the process edge print it and exit with code 2 (`exitOnConfigError`).
 */
import net from "node:net";
import path from "node:path";
import { z } from "zod";
import "./zod-messages";
import { parseRedisUrl, redactRedisUrl, withDatabase } from "./redis/url";

export const CONFIG_EXIT_CODE = 2;

/** `redis://`, `rediss://` or `redis+sentinel://` (lib/redis/url.ts says what each form means). */
const redisUrl = z
  .string()
  .trim()
  .min(1, "must not be empty")
  .superRefine((value, ctx) => {
    const parsed = parseRedisUrl(value);
    if (!parsed.ok) ctx.addIssue({ code: "custom", message: parsed.problem });
  });

const port = z
  .string()
  .trim()
  .regex(/^\d+$/, "must be a whole number from 1 to 65535")
  .transform(Number)
  .refine((n) => n >= 1 && n <= 65535, "must be a whole number from 1 to 65535");

/** A DNS host name (RFC 1123): dot-separated labels of letters, digits and inner '-', 253 characters at most. */
const HOST_NAME =
  /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

const host = z
  .string()
  .trim()
  .min(1, "must not be empty")
  .refine(
    // A name's last label is never all digits (RFC 3696): `999.1.1.1` is a bad IP address, not a name.
    (value) =>
      net.isIP(value.replace(/^\[(.*)\]$/, "$1")) !== 0 || (HOST_NAME.test(value) && !/(^|\.)\d+$/.test(value)),
    "must be a host name or IP address, e.g. 127.0.0.1 or 0.0.0.0",
  );

/**
 * The dashboard's address as browsers see it behind a reverse proxy: its origin is accepted for
 * cookie-carried mutations even when the proxy rewrites Host, and an https origin makes the
 * session cookie Secure although the proxy talks plain http to claimwatch.
 */
const publicUrl = z
  .string()
  .trim()
  .transform((value, ctx) => {
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      ctx.addIssue({ code: "custom", message: "must be a URL like https://claims.example.com" });
      return z.NEVER;
    }
    if (!["http:", "https:"].includes(url.protocol) || url.username || url.password) {
      ctx.addIssue({ code: "custom", message: "must be an http(s) URL without user or password" });
      return z.NEVER;
    }
    if (url.pathname !== "/" || url.search || url.hash) {
      ctx.addIssue({
        code: "custom",
        message: "must be an origin only, like https://claims.example.com (claimwatch is served at /)",
      });
      return z.NEVER;
    }
    return url.origin;
  });

/**
 * Access tokens: comma-separated, each optionally `name:token` (the name is what the audit log
 * shows). A token is at least 16 characters of [A-Za-z0-9_.~+/=-]: long enough not to guess.
 * Names and tokens are unique, here and across both variables (`tokenClash`): two people under
 * one name could not be told apart in the audit log, and of two entries with one token only the
 * first is ever matched.
 */
const tokenList = (role: string) =>
  z
    .string()
    .trim()
    .transform((value, ctx) => {
      const entries: { name: string; token: string }[] = [];
      for (const [i, part] of value
        .split(",")
        .map((p) => p.trim())
        .entries()) {
        if (part === "") {
          ctx.addIssue({
            code: "custom",
            message: `entry ${i + 1} is empty (a comma too many?): give name:token entries separated by single commas`,
          });
          return z.NEVER;
        }
        const colon = part.indexOf(":");
        const name = colon > 0 ? part.slice(0, colon) : `${role}-${i + 1}`;
        const token = colon > 0 ? part.slice(colon + 1) : part;
        if (!/^[A-Za-z0-9_.@-]{1,64}$/.test(name)) {
          ctx.addIssue({
            code: "custom",
            message: `entry ${i + 1}: the name before ':' must be 1-64 letters, digits or _ . @ -`,
          });
          return z.NEVER;
        }
        if (!/^[A-Za-z0-9_.~+/=-]{16,256}$/.test(token)) {
          ctx.addIssue({
            code: "custom",
            message: `entry ${i + 1} (${name}): a token must be 16-256 characters of letters, digits or _ . ~ + / = -`,
          });
          return z.NEVER;
        }
        entries.push({ name, token });
      }
      const clash = tokenClash(entries, [], role);
      if (clash) {
        ctx.addIssue({ code: "custom", message: clash });
        return z.NEVER;
      }
      return entries;
    });

type TokenEntry = { name: string; token: string };

/**
 * The first name or token of `entries` used before (earlier in `entries`, or in `others`, the
 * other variable's entries, named `othersVariable`), as one line that never shows a token.
 */
function tokenClash(
  entries: readonly TokenEntry[],
  others: readonly TokenEntry[],
  role: string,
  othersVariable = "",
): string | null {
  const unnamedNote = (name: string) =>
    name.startsWith(`${role}-`) ? ` (an entry without 'name:' is named ${role}-<position>)` : "";
  for (const [i, { name, token }] of entries.entries()) {
    const earlier = entries.slice(0, i);
    const sameName = earlier.findIndex((e) => e.name === name);
    if (sameName >= 0) {
      return `entries ${sameName + 1} and ${i + 1} are both named '${name}'${unnamedNote(name)}; give each token its own name (the audit log shows it)`;
    }
    const sameToken = earlier.findIndex((e) => e.token === token);
    if (sameToken >= 0) {
      return `entry ${i + 1} (${name}) has the same token as entry ${sameToken + 1} (${earlier[sameToken]!.name}); each entry needs its own token`;
    }
    const otherName = others.findIndex((e) => e.name === name);
    if (otherName >= 0) {
      return `entry ${i + 1} is named '${name}', a name ${othersVariable} already uses; give each token its own name (the audit log shows it)`;
    }
    const otherToken = others.findIndex((e) => e.token === token);
    if (otherToken >= 0) {
      return `entry ${i + 1} (${name}) has the same token as ${othersVariable} entry ${otherToken + 1} (${others[otherToken]!.name}); a token has one role`;
    }
  }
  return null;
}

const keyPrefix = z
  .string()
  .trim()
  .regex(
    /^[A-Za-z0-9_-]{1,32}$/,
    "must be 1-32 characters of letters, digits, '_' or '-' (it becomes a Redis hash tag)",
  );

/** A whole number from `min` to `max` (of `unit`), written in decimal digits. */
const wholeNumber = (min: number, max: number, unit?: string) => {
  const message = `must be a whole number${unit ? ` of ${unit}` : ""} from ${min} to ${max}`;
  return z
    .string()
    .trim()
    .regex(/^\d+$/, message)
    .transform(Number)
    .refine((n) => n >= min && n <= max, message);
};

/** Environment variables, exactly as an operator writes them. */
const envSchema = z.object({
  REDIS_URL: redisUrl.optional(),
  CLAIMS_REDIS_URL: redisUrl.optional(),
  HOST: host.default("127.0.0.1"),
  PORT: port.default(3000),
  CLAIMWATCH_CONFIG: z.string().trim().min(1, "must not be empty").default("./claimwatch.yaml"),
  CLAIMWATCH_DATA_DIR: z.string().trim().min(1, "must not be empty").default("./.data"),
  CLAIMWATCH_KEY_PREFIX: keyPrefix.default("claimwatch"),
  CLAIMWATCH_WORKER_CONCURRENCY: wholeNumber(1, 256).default(4),
  CLAIMWATCH_TRIGGER_REPLICAS: wholeNumber(0, 15, "replicas").default(0),
  CLAIMWATCH_INPUTS_VISIBLE_AFTER_MS: wholeNumber(0, 600_000, "milliseconds").optional(),
  CLAIMWATCH_UPKEEP_SLOW_MS: wholeNumber(1_000, 3_600_000, "milliseconds").default(30_000),
  CLAIMWATCH_OPERATOR_TOKEN: tokenList("operator").optional(),
  CLAIMWATCH_VIEWER_TOKEN: tokenList("viewer").optional(),
  CLAIMWATCH_PUBLIC_URL: publicUrl.optional(),
  CLAIMWATCH_METRICS_TOKEN: z
    .string()
    .trim()
    .regex(/^[A-Za-z0-9_.~+/=-]{16,256}$/, "must be 16-256 characters of letters, digits or _ . ~ + / = -")
    .optional(),
});

export interface Config {
  /** Queue and run records. `undefined`: use the embedded Redis that `npm start` runs. */
  redisUrl: string | undefined;
  /** Claims. `undefined`: logical DB 1 of whichever server `redisUrl` resolves to. */
  claimsRedisUrl: string | undefined;
  host: string;
  port: number;
  /** Absolute path of the rebuild definitions file. */
  definitionsPath: string;
  /** Why that file: named by CLAIMWATCH_CONFIG, or the default in the working directory (said when it is missing). */
  definitionsSource: { from: "CLAIMWATCH_CONFIG"; value: string } | { from: "default"; cwd: string };
  /** Absolute path of the data directory (embedded Redis data, generated secrets). */
  dataDir: string;
  /** Every Redis key claimwatch writes starts with `{keyPrefix}:` (one hash slot). */
  keyPrefix: string;
  /** Rebuild jobs one worker process runs at once. */
  workerConcurrency: number;
  /**
   * How long a job's inputs are read before its run record begins anyway (running, without a
   * version yet), so a slow read shows in the run history. `undefined`: the worker's default
   * (INPUTS_VISIBLE_AFTER_MS in lib/rebuilds/run-rebuild.ts).
   */
  inputsVisibleAfterMs: number | undefined;
  /** A worker's upkeep after a beat running this long is said in its log, heartbeat and the health report. */
  upkeepSlowMs: number;
  /**
   * Replicas of the main Redis that must hold a requested rebuild (WAIT) before it is answered
   * as queued; 0: the primary's answer is enough (lib/redis/replicas.ts).
   */
  triggerReplicas: number;
  /** Configured access tokens; empty: the launcher generates an operator token in the data dir. */
  operatorTokens: { name: string; token: string }[];
  viewerTokens: { name: string; token: string }[];
  /** Origin browsers use to reach the dashboard through a proxy (`https://host[:port]`), if set. */
  publicOrigin: string | undefined;
  /** Bearer token that may read `GET /metrics` (and nothing else), if set. */
  metricsToken: string | undefined;
}

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|localhost|::1|\[::1\])$/;

export function isLoopbackHost(host: string): boolean {
  return LOOPBACK.test(host);
}

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    readonly problem: string,
  ) {
    super(`${variable}: ${problem}`);
    this.name = "ConfigError";
  }
}

export type ConfigResult = { ok: true; config: Config } | { ok: false; error: ConfigError };

/** Parses the environment. An empty variable counts as unset, as shells often export `X=`. */
export function parseConfig(env: Record<string, string | undefined>, cwd: string = process.cwd()): ConfigResult {
  const present: Record<string, string> = {};
  for (const name of Object.keys(envSchema.shape)) {
    const value = env[name];
    if (value !== undefined && value !== "") present[name] = value;
  }
  const parsed = envSchema.safeParse(present);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const variable = String(issue.path[0] ?? "environment");
    // Never echo a token back: it would end up in logs.
    const secret = variable.endsWith("_TOKEN");
    const raw = present[variable];
    // Never echo a password either: a Redis URL is shown without it.
    const safe = raw === undefined ? undefined : redactRedisUrl(raw);
    const shown = safe === undefined || secret ? "" : ` (got ${JSON.stringify(safe)})`;
    return { ok: false, error: new ConfigError(variable, `${issue.message}${shown}`) };
  }
  const e = parsed.data;
  const operatorTokens = e.CLAIMWATCH_OPERATOR_TOKEN ?? [];
  const viewerTokens = e.CLAIMWATCH_VIEWER_TOKEN ?? [];
  const clash = tokenClash(viewerTokens, operatorTokens, "viewer", "CLAIMWATCH_OPERATOR_TOKEN");
  if (clash) return { ok: false, error: new ConfigError("CLAIMWATCH_VIEWER_TOKEN", clash) };
  // The metrics token reads /metrics only: one that is also a login token has two roles (helper-137).
  const metricsAlso = [...operatorTokens, ...viewerTokens].find((t) => t.token === e.CLAIMWATCH_METRICS_TOKEN);
  if (metricsAlso) {
    const variable = operatorTokens.includes(metricsAlso) ? "CLAIMWATCH_OPERATOR_TOKEN" : "CLAIMWATCH_VIEWER_TOKEN";
    return {
      ok: false,
      error: new ConfigError(
        "CLAIMWATCH_METRICS_TOKEN",
        `is the token of ${variable} entry '${metricsAlso.name}'; a token has one role: give /metrics its own`,
      ),
    };
  }
  if (!isLoopbackHost(e.HOST) && operatorTokens.length + viewerTokens.length === 0) {
    return {
      ok: false,
      error: new ConfigError(
        "HOST",
        `${e.HOST} is reachable from other machines: set CLAIMWATCH_OPERATOR_TOKEN (and optionally CLAIMWATCH_VIEWER_TOKEN) first, or bind to 127.0.0.1`,
      ),
    };
  }
  return {
    ok: true,
    config: {
      redisUrl: e.REDIS_URL,
      claimsRedisUrl: e.CLAIMS_REDIS_URL,
      host: e.HOST,
      port: e.PORT,
      definitionsPath: path.resolve(cwd, e.CLAIMWATCH_CONFIG),
      definitionsSource:
        present.CLAIMWATCH_CONFIG === undefined
          ? { from: "default", cwd }
          : { from: "CLAIMWATCH_CONFIG", value: e.CLAIMWATCH_CONFIG },
      dataDir: path.resolve(cwd, e.CLAIMWATCH_DATA_DIR),
      keyPrefix: e.CLAIMWATCH_KEY_PREFIX,
      workerConcurrency: e.CLAIMWATCH_WORKER_CONCURRENCY,
      inputsVisibleAfterMs: e.CLAIMWATCH_INPUTS_VISIBLE_AFTER_MS,
      upkeepSlowMs: e.CLAIMWATCH_UPKEEP_SLOW_MS,
      triggerReplicas: e.CLAIMWATCH_TRIGGER_REPLICAS,
      operatorTokens,
      viewerTokens,
      publicOrigin: e.CLAIMWATCH_PUBLIC_URL,
      metricsToken: e.CLAIMWATCH_METRICS_TOKEN,
    },
  };
}

let cached: Config | undefined;

/** The process's configuration, parsed on first use. Throws `ConfigError` on a bad value. */
export function getConfig(): Config {
  if (cached) return cached;
  const result = parseConfig(process.env);
  if (!result.ok) throw result.error;
  cached = result.config;
  return cached;
}

/** For process entry points: parse, or print one line and exit 2. */
export function loadConfigOrExit(processName: string): Config {
  try {
    return getConfig();
  } catch (error) {
    if (error instanceof ConfigError) exitOnConfigError(processName, error);
    throw error;
  }
}

export function exitOnConfigError(processName: string, error: ConfigError): never {
  process.stderr.write(`${processName}: configuration error: ${error.message}\n`);
  process.exit(CONFIG_EXIT_CODE);
}

/** The claims Redis: `CLAIMS_REDIS_URL`, else logical DB 1 of the main server (or Sentinel group). */
export function deriveClaimsRedisUrl(mainUrl: string, claimsUrl: string | undefined): string {
  if (claimsUrl) return claimsUrl;
  return withDatabase(mainUrl, 1);
}
