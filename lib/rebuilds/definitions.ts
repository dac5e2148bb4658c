/**
 * Rebuild definitions (`CLAIMWATCH_CONFIG`, default claimwatch.yaml): parsed and validated once
 * at start-up. An error names the file, the path inside it (`rebuilds.parcels.claim.ttl`) and the
 * problem. Relative paths are resolved against the directory of the definitions file.
 */
import fs from "node:fs";
import path from "node:path";
import { CronExpressionParser } from "cron-parser";
import { parse as parseYaml, YAMLParseError } from "yaml";
import { z } from "zod";
import { alertsSchema, rebuildAlertsSchema, type AlertsConfig } from "../alerts/config";
import { tryClaimName } from "../claims/name";
import { parseDuration } from "./duration";
import { NAME_PATTERN as NAME } from "../names";

/** Rebuild and tenant names end up in claim names, job ids and URLs: keep them plain. */
const nameSchema = (what: string) =>
  z.string().regex(NAME, `${what} must be 1-64 letters, digits, '_' or '-', starting with a letter or digit`);

const MAX_TIMER_MS = 2_147_483_647;
const DURATION_MESSAGE = "must be a duration like 500ms, 90s, 10m, 2h, 1d or 1h30m";
const duration = z
  .string()
  .regex(/^(?:\d+(?:ms|s|m|h|d))+$/, DURATION_MESSAGE)
  .refine((text) => parseDuration(text) !== undefined, { message: DURATION_MESSAGE })
  .transform((text) => parseDuration(text)!);

/** Durations that drive a timer: Node timers overflow above 2^31-1 ms (~24.8 days) and fire at once. */
const timerDuration = duration.refine((ms) => ms <= MAX_TIMER_MS, { message: "must be at most 24d (a timer limit)" });

const BYTE_UNITS: Record<string, number> = { "": 1, B: 1, K: 1024, KI: 1024, KIB: 1024, KB: 1024 };
for (const [prefix, power] of [
  ["M", 2],
  ["G", 3],
  ["T", 4],
] as const) {
  for (const suffix of ["", "I", "IB", "B"]) BYTE_UNITS[prefix + suffix] = 1024 ** power;
}
const BYTE_SIZE_MESSAGE = "must be a size like 512MiB, 2GiB or a number of bytes (K/M/G are powers of 1024)";
/** A size in bytes: `536870912`, `512MiB`, `512Mi`, `512M` (binary units, as cgroups count). */
const byteSize = z.union([z.number().int(), z.string()]).transform((value, ctx) => {
  const match = /^(\d+)\s*([A-Za-z]*)$/.exec(String(value).trim());
  const unit = match ? BYTE_UNITS[match[2]!.toUpperCase()] : undefined;
  if (!match || unit === undefined) {
    ctx.addIssue({ code: "custom", message: BYTE_SIZE_MESSAGE });
    return z.NEVER;
  }
  const bytes = Number(match[1]) * unit;
  if (!Number.isSafeInteger(bytes) || bytes < 4 * 1024 ** 2) {
    ctx.addIssue({ code: "custom", message: "must be at least 4MiB" });
    return z.NEVER;
  }
  return bytes;
});

const filePath = z
  .string()
  .min(1, "must not be empty")
  // eslint-disable-next-line no-control-regex
  .refine((p) => !/[\u0000-\u001f]/.test(p), "must not contain control characters");

const isValidTimeZone = (tz: string) => {
  try {
    new Intl.DateTimeFormat("en", { timeZone: tz });
    return true;
  } catch {
    return false;
  }
};

const scheduleSchema = z
  .strictObject({
    cron: z.string().min(1, "must not be empty"),
    tz: z.string().default("UTC").refine(isValidTimeZone, "must be an IANA time zone such as Europe/Berlin or UTC"),
  })
  .superRefine((schedule, ctx) => {
    try {
      CronExpressionParser.parse(schedule.cron, { tz: schedule.tz }).next();
    } catch (error) {
      ctx.addIssue({
        code: "custom",
        path: ["cron"],
        message: `is not a cron expression: ${(error as Error).message}`,
      });
    }
  });

const placeholderArg = z.string();

const runStepSchema = z.strictObject({
  name: nameSchema("a step name"),
  run: z.array(placeholderArg).min(1, "must name a program: an argv array like [tar, -czf, out.tgz, dir]"),
  env: z
    .record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name"), z.string())
    .optional(),
  cwd: z.string().optional(),
  transientExitCodes: z.array(z.number().int().min(1).max(255)).default([]),
  /** After an abort, how long the program has between SIGTERM and SIGKILL. */
  killGrace: timerDuration.default(5_000),
  /** Resource limits of the step's processes together (enforced with a cgroup per step). */
  limits: z
    .strictObject({
      memory: byteSize.optional(),
      pids: z.number().int().min(8, "must be at least 8").max(4_194_304).optional(),
    })
    .default({}),
});

const tilesStepSchema = z.strictObject({
  name: nameSchema("a step name"),
  tiles: z
    .strictObject({
      input: filePath,
      layer: nameSchema("a layer name"),
      minZoom: z.number().int().min(0).max(24).default(0),
      maxZoom: z.number().int().min(0).max(24).default(12),
    })
    .refine((t) => t.minZoom <= t.maxZoom, { message: "minZoom must not exceed maxZoom", path: ["minZoom"] }),
});

const stepSchema = z.union([runStepSchema, tilesStepSchema], {
  error: "a step needs a name and exactly one of `run` (argv array) or `tiles` ({input, layer, minZoom, maxZoom})",
});

const rebuildSchema = z
  .strictObject({
    output: filePath,
    tenants: z.array(nameSchema("a tenant name")).min(1, "must list at least one tenant, or be left out").optional(),
    inputs: z.array(filePath).default([]),
    schedule: scheduleSchema.optional(),
    claim: z.strictObject({ ttl: timerDuration.default(90_000), refreshEvery: timerDuration.default(30_000) }).default({
      ttl: 90_000,
      refreshEvery: 30_000,
    }),
    timeLimit: timerDuration.default(7_200_000),
    retries: z
      .strictObject({
        attempts: z.number().int().min(1).max(50).default(4),
        backoff: timerDuration.default(30_000),
        maxBackoff: timerDuration.default(600_000),
      })
      .default({ attempts: 4, backoff: 30_000, maxBackoff: 600_000 }),
    idempotency: z.strictObject({ ttl: duration.default(86_400_000) }).default({ ttl: 86_400_000 }),
    steps: z.array(stepSchema).min(1, "must list at least one step"),
    /** Per-rebuild alert settings (lib/alerts/config). */
    alerts: rebuildAlertsSchema.optional(),
  })
  .superRefine((rebuild, ctx) => {
    if (rebuild.timeLimit <= rebuild.claim.ttl) {
      ctx.addIssue({
        code: "custom",
        path: ["timeLimit"],
        message: "must be longer than claim.ttl, or the run is killed while still holding a claim it cannot release",
      });
    }
    if (rebuild.claim.refreshEvery > rebuild.claim.ttl / 2) {
      ctx.addIssue({
        code: "custom",
        path: ["claim", "refreshEvery"],
        message: "must be at most half of claim.ttl, so one missed refresh does not lose the claim",
      });
    }
    if (rebuild.tenants && new Set(rebuild.tenants).size !== rebuild.tenants.length) {
      ctx.addIssue({ code: "custom", path: ["tenants"], message: "lists a tenant twice" });
    }
    const names = rebuild.steps.map((s) => s.name);
    if (new Set(names).size !== names.length) {
      ctx.addIssue({ code: "custom", path: ["steps"], message: "two steps share a name" });
    }
  });

const retentionSchema = z.strictObject({
  /** Run records kept per rebuild (and per rebuild + tenant). */
  runs: z.number().int().min(10).max(1_000_000).default(10_000),
  /** Run records older than this are removed. */
  runAge: duration.default(30 * 86_400_000),
  /** Finished BullMQ jobs kept for inspection (completed / failed), besides the run records. */
  completedJobs: z.number().int().min(0).max(100_000).default(1_000),
  failedJobs: z.number().int().min(0).max(100_000).default(5_000),
  /** Old builds kept on disk per output (and tenant) besides `current`, for a manual roll-back. */
  builds: z.number().int().min(0).max(100_000).default(5),
});
export type Retention = z.output<typeof retentionSchema>;
export const DEFAULT_RETENTION_CONFIG: Retention = retentionSchema.parse({});

export const definitionsFileSchema = z.strictObject({
  rebuilds: z.record(nameSchema("a rebuild name"), rebuildSchema),
  retention: retentionSchema.default(DEFAULT_RETENTION_CONFIG),
  /** Alert receivers and rules (lib/alerts/config); absent: no alert evaluation. */
  alerts: alertsSchema.optional(),
});

export type RunStep = z.output<typeof runStepSchema>;
export type TilesStep = z.output<typeof tilesStepSchema>;
export type Step = RunStep | TilesStep;
export type RebuildDefinition = z.output<typeof rebuildSchema> & {
  name: string;
  /** `output`, resolved to an absolute path. */
  outputPath: string;
  /**
   * The output's identity, which names its claim: the real path (`fs.realpath`) of the output,
   * or of its nearest existing ancestor followed by the rest. Workers reaching one directory by
   * different paths (a symlinked release directory) name one claim.
   */
  claimPath: string;
  /** `inputs`, resolved to absolute paths. */
  inputPaths: string[];
  /** The directory relative paths in steps are resolved against. */
  baseDir: string;
};

export interface Definitions {
  file: string;
  rebuilds: Map<string, RebuildDefinition>;
  retention: Retention;
  /** `undefined` when the file has no `alerts:` section. */
  alerts?: AlertsConfig;
}

export class DefinitionsError extends Error {
  constructor(
    readonly file: string,
    readonly where: string,
    readonly problem: string,
  ) {
    super(`${file}: ${where ? `${where}: ` : ""}${problem}`);
    this.name = "DefinitionsError";
  }
}

export type DefinitionsResult = { ok: true; definitions: Definitions } | { ok: false; error: DefinitionsError };

/** Control characters and line separators, escaped: an error is always one line. */
// eslint-disable-next-line no-control-regex
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g;
export function oneLine(text: string): string {
  return text.replace(UNPRINTABLE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

function issuePath(path: PropertyKey[]): string {
  return path
    .map((part, i) => (typeof part === "number" ? `[${part}]` : `${i === 0 ? "" : "."}${oneLine(String(part))}`))
    .join("");
}

/**
 * `__proto__` keys: JSON.parse and YAML make them own properties, and zod's records drop them
 * silently — a rebuild named so would vanish without a word. Refuse them, with their path.
 */
function findProtoKey(root: unknown): (string | number)[] | null {
  // Iterative and depth-capped: hostile documents nest 10 000 deep or alias themselves.
  const seen = new WeakSet<object>();
  const stack: { value: unknown; trail: (string | number)[] }[] = [{ value: root, trail: [] }];
  while (stack.length > 0) {
    const { value, trail } = stack.pop()!;
    if (!value || typeof value !== "object" || seen.has(value) || trail.length > 64) continue;
    seen.add(value);
    if (Array.isArray(value)) {
      value.forEach((item, i) => stack.push({ value: item, trail: [...trail, i] }));
      continue;
    }
    for (const key of Object.keys(value)) {
      if (key === "__proto__") return [...trail, key];
      stack.push({ value: (value as Record<string, unknown>)[key], trail: [...trail, key] });
    }
  }
  return null;
}

function valueAt(root: unknown, trail: PropertyKey[]): unknown {
  let value = root;
  for (const part of trail)
    value = value && typeof value === "object" ? (value as Record<PropertyKey, unknown>)[part] : undefined;
  return value;
}

/** Validates already-parsed YAML/JSON. `file` is used in messages and to resolve relative paths. */
export function parseDefinitions(raw: unknown, file: string): DefinitionsResult {
  const shown = oneLine(path.basename(file));
  const protoKey = findProtoKey(raw);
  if (protoKey) {
    return {
      ok: false,
      error: new DefinitionsError(shown, issuePath(protoKey.slice(0, -1)), "'__proto__' is not allowed as a key"),
    };
  }
  const parsed = definitionsFileSchema.safeParse(raw ?? {});
  if (!parsed.success) {
    let issue = parsed.error.issues[0]!;
    // A step that says which kind it is (`run` or `tiles`) gets that kind's own error, not the union's.
    if (issue.code === "invalid_union") {
      const value = valueAt(raw, issue.path);
      const branch = value && typeof value === "object" ? ("run" in value ? 0 : "tiles" in value ? 1 : -1) : -1;
      const inner = branch >= 0 ? issue.errors[branch]?.[0] : undefined;
      if (inner) issue = { ...inner, path: [...issue.path, ...inner.path] } as typeof issue;
    }
    let message = issue.message;
    if (issue.code === "unrecognized_keys") message = `unknown key ${issue.keys.map((k) => `'${k}'`).join(", ")}`;
    if (issue.code === "invalid_key") message = `invalid name: ${issue.issues[0]?.message ?? message}`;
    return { ok: false, error: new DefinitionsError(shown, issuePath(issue.path), oneLine(message)) };
  }
  const baseDir = path.dirname(path.resolve(file));
  const rebuilds = new Map<string, RebuildDefinition>();
  const owners = new Map<string, string>();
  for (const [name, rebuild] of Object.entries(parsed.data.rebuilds)) {
    const outputPath = path.resolve(baseDir, rebuild.output);
    const pinned = pinnedPath(outputPath);
    if (!pinned.ok) {
      return {
        ok: false,
        error: new DefinitionsError(
          shown,
          `rebuilds.${name}.output`,
          oneLine(`identity cannot be pinned: ${pinned.reason}`),
        ),
      };
    }
    const claimPath = pinned.path;
    // The claim is named for the output (+ tenant): an output that makes no valid claim name
    // (the root directory, glob characters, …) is refused here, not when the first run starts.
    for (const tenant of rebuild.tenants ?? [undefined]) {
      const check = tryClaimName(claimPath, tenant);
      if (!check.ok) {
        return {
          ok: false,
          error: new DefinitionsError(
            shown,
            `rebuilds.${name}.output`,
            oneLine(`cannot name a claim: ${check.reason}`),
          ),
        };
      }
    }
    const owner = owners.get(claimPath);
    if (owner) {
      return {
        ok: false,
        error: new DefinitionsError(
          shown,
          `rebuilds.${name}.output`,
          `is also the output of rebuild '${owner}'; two rebuilds must not share an output`,
        ),
      };
    }
    for (const [other, otherOutput] of [...owners.entries()].map(([o, n]) => [n, o] as const)) {
      if (claimPath.startsWith(otherOutput + path.sep) || otherOutput.startsWith(claimPath + path.sep)) {
        return {
          ok: false,
          error: new DefinitionsError(
            shown,
            `rebuilds.${name}.output`,
            `is nested with the output of rebuild '${other}'; outputs must not contain each other`,
          ),
        };
      }
    }
    owners.set(claimPath, name);
    rebuilds.set(name, {
      ...rebuild,
      name,
      outputPath,
      claimPath,
      inputPaths: rebuild.inputs.map((input) => path.resolve(baseDir, input)),
      baseDir,
    });
  }
  return {
    ok: true,
    definitions: { file: path.resolve(file), rebuilds, retention: parsed.data.retention, alerts: parsed.data.alerts },
  };
}

/**
 * The real path of `target`, or of its nearest existing ancestor followed by the segments that
 * do not exist yet (created later as plain directories, they resolve to that path). A symlink
 * loop, a file in the way or an unreadable ancestor leaves no identity: refused.
 */
function pinnedPath(target: string): { ok: true; path: string } | { ok: false; reason: string } {
  const missing: string[] = [];
  let existing = target;
  for (;;) {
    try {
      return { ok: true, path: path.join(fs.realpathSync.native(existing), ...missing.reverse()) };
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code ?? String(error);
      if (code !== "ENOENT") return { ok: false, reason: `${existing}: ${code}` };
      const parent = path.dirname(existing);
      if (parent === existing) return { ok: false, reason: `${target}: no ancestor exists` };
      missing.push(path.basename(existing));
      existing = parent;
    }
  }
}

export function loadDefinitions(file: string): DefinitionsResult {
  const shown = path.basename(file);
  let text: string;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const problem = code === "ENOENT" ? "file not found (set CLAIMWATCH_CONFIG)" : `cannot be read (${code})`;
    return { ok: false, error: new DefinitionsError(oneLine(file), "", problem) };
  }
  let raw: unknown;
  try {
    // logLevel "error": YAML warnings would otherwise go to stderr through process.emitWarning.
    raw = parseYaml(text, { uniqueKeys: true, maxAliasCount: 100, logLevel: "error" });
  } catch (error) {
    const where = error instanceof YAMLParseError && error.linePos ? `line ${error.linePos[0].line}` : "";
    const message = (error as Error).message.split("\n")[0] ?? "is not valid YAML";
    return { ok: false, error: new DefinitionsError(shown, where, oneLine(`is not valid YAML: ${message}`)) };
  }
  return parseDefinitions(raw, file);
}

/**
 * Where one tenant's builds live: `<output>/<tenant>` (tenant names are plain path segments),
 * or `<output>` itself for a rebuild without tenants. Each tenant has its own claim, fence,
 * published pointer — and so its own `builds/` and `current`.
 */
export function outputDirOf(rebuild: Pick<RebuildDefinition, "outputPath">, tenant: string | undefined): string {
  return tenant ? path.join(rebuild.outputPath, tenant) : rebuild.outputPath;
}

/** The claim-relevant tenants of a rebuild: its tenants, or one unnamed "tenant". */
/**
 * The one tenant check (trigger, API, worker): null when `tenant` fits the rebuild — one of its
 * tenants, or none for a rebuild without tenants — else why not, in one line.
 */
export function tenantProblem(rebuild: RebuildDefinition, tenant: string | undefined): string | null {
  if (rebuild.tenants) {
    return tenant && rebuild.tenants.includes(tenant)
      ? null
      : `rebuild '${rebuild.name}' needs a tenant, one of: ${rebuild.tenants.join(", ")}`;
  }
  return tenant === undefined ? null : `rebuild '${rebuild.name}' has no tenants`;
}

export function tenantsOf(rebuild: RebuildDefinition): (string | undefined)[] {
  return rebuild.tenants ?? [undefined];
}

/** JSON Schema of the definitions file, for editor completion (`claimwatch.schema.json`). */
export function definitionsJsonSchema(): object {
  return z.toJSONSchema(definitionsFileSchema, { io: "input", unrepresentable: "any" });
}

/** For process entry points: load, or print one line and exit 2. */
export function loadDefinitionsOrExit(file: string, processName: string): Definitions {
  const result = loadDefinitions(file);
  if (result.ok) return result.definitions;
  process.stderr.write(`${processName}: definitions error: ${result.error.message}\n`);
  process.exit(2);
}

/** After a step's SIGKILL: the kernel ends its namespace, the worker drains its output and releases. */
const STOP_SLACK_MS = 2_000;

/**
 * How long after it notices the loss of its claim a run of `rebuild` has certainly stopped
 * writing: its steps' longest `killGrace` (SIGTERM, then SIGKILL), plus slack.
 */
export function stopWithinMs(rebuild: Pick<RebuildDefinition, "steps">): number {
  let longestGrace = 0;
  for (const step of rebuild.steps) if ("run" in step) longestGrace = Math.max(longestGrace, step.killGrace);
  return longestGrace + STOP_SLACK_MS;
}

/** Slack for the release and hand-back after the last step has been killed. */
const SHUTDOWN_SLACK_MS = 10_000;

/**
 * How long a worker's shutdown waits for its jobs to hand back (deploys): the longest `killGrace`
 * of any step, plus time to release the claim and requeue the job. A step is SIGKILLed when its
 * grace ends, so no step of a handed-back job can still run when the next attempt starts.
 */
export function shutdownWaitMs(definitions: Pick<Definitions, "rebuilds">): number {
  let longestGrace = 0;
  for (const rebuild of definitions.rebuilds.values()) {
    for (const step of rebuild.steps) if ("run" in step) longestGrace = Math.max(longestGrace, step.killGrace);
  }
  return longestGrace + SHUTDOWN_SLACK_MS;
}
