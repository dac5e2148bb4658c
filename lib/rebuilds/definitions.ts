/**
 * Rebuild definitions (`CLAIMWATCH_CONFIG`, default claimwatch.yaml): parsed and validated once
 * at start-up. An error names the file, the path inside it (`rebuilds.parcels.claim.ttl`) and the
 * problem. Relative paths are resolved against the directory of the definitions file.
 */
import fs from "node:fs";
import path from "node:path";
import { CronExpressionParser } from "cron-parser";
import { CST, isMap, isScalar, isSeq, LineCounter, parseDocument, Parser, type Document, type YAMLError } from "yaml";
import { z } from "zod";
import "../zod-messages";
import { alertsSchema, rebuildAlertsSchema, type AlertsConfig } from "../alerts/config";
import { tryClaimName } from "../claims/name";
import { durationSchema as duration, formatDuration, timerDurationSchema as timerDuration } from "./duration";
import { NAME_PATTERN as NAME } from "../names";
import { meantAsKey, meantKey, nearMiss } from "../zod-keys";

/** Rebuild and tenant names end up in claim names, job ids and URLs: keep them plain. */
const nameSchema = (what: string) =>
  z.string().regex(NAME, `${what} must be 1-64 letters, digits, '_' or '-', starting with a letter or digit`);

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
      // A bad tz is reported by itself; the cron's own syntax is still checked (in UTC), as
      // cron-parser fails any expression in an unknown zone ("unhandled timestamp: Invalid Date").
      CronExpressionParser.parse(schedule.cron, { tz: isValidTimeZone(schedule.tz) ? schedule.tz : "UTC" }).next();
    } catch (error) {
      ctx.addIssue({
        code: "custom",
        path: ["cron"],
        message: `is not a cron expression: ${(error as Error).message}`,
      });
      return;
    }
    const step = cronStepProblem(schedule.cron);
    if (step) ctx.addIssue({ code: "custom", path: ["cron"], message: step });
  });

/** The fields of a 5-field cron (and the seconds before them in a 6-field one), with their ranges. */
const CRON_FIELDS = [
  { name: "minute", min: 0, max: 59 },
  { name: "hour", min: 0, max: 23 },
  { name: "day-of-month", min: 1, max: 31 },
  { name: "month", min: 1, max: 12 },
  { name: "day-of-week", min: 0, max: 7 },
];
const SECONDS_FIELD = { name: "second", min: 0, max: 59 };

/**
 * A step no larger than its field's whole range (`*\/61` minutes): cron-parser takes it and ticks
 * once per hour at the range's start, not what was written (black-box helper-147). Null when every
 * step fits.
 */
export function cronStepProblem(cron: string): string | null {
  const parts = cron.trim().split(/\s+/);
  if (parts.length !== 5 && parts.length !== 6) return null; // a macro (@hourly): no steps
  const fields = parts.length === 6 ? [SECONDS_FIELD, ...CRON_FIELDS] : CRON_FIELDS;
  for (const [index, part] of parts.entries()) {
    const field = fields[index]!;
    for (const item of part.split(",")) {
      const step = /\/(\d+)$/.exec(item);
      if (!step) continue;
      const span = field.max - field.min + 1;
      if (Number(step[1]) >= span) {
        return `step /${step[1]} in the ${field.name} field is not less than its range (${field.min}-${field.max}): it would tick only at the range's start; write the times you mean`;
      }
    }
  }
  return null;
}

/**
 * The placeholders `expandPlaceholders` (steps/context.ts) replaces in `run`, `env` and `cwd`;
 * a test holds the two together.
 */
export const PLACEHOLDER_NAMES = ["work", "output", "version", "tenant", "rebuild"] as const;
const KNOWN_PLACEHOLDERS: ReadonlySet<string> = new Set(PLACEHOLDER_NAMES);
/**
 * What reads as a placeholder: one word in braces. Substitution leaves an unknown one as it is,
 * so a typo (`{wrk}`) would reach the program as a literal path. Refused here is an unknown word
 * that looks meant for claimwatch (`mistakenPlaceholder`); any other is the program's own syntax
 * and left alone (awk `{print}`, jq `{name}`, sed `/x/{d}`). Never placeholders: braces around
 * anything but one word (`{}`, `{a,b}`, `{1..3}`, `{print $1}`, `{2,3}`), a word starting with a
 * digit, and braces another syntax opens: `${VAR}` (shell), `%{http_code}` (curl), `@{upstream}`
 * (git), `#{x}` (Ruby), `\p{Lu}` `\x{e9}` (regexps).
 */
const PLACEHOLDER_LIKE = /(?<![$%@#]|\\[A-Za-z])\{([A-Za-z_][A-Za-z0-9_]*)\}/g;
const PLACEHOLDER_LIST = PLACEHOLDER_NAMES.map((name) => `{${name}}`).join(" ");
/** Words (folded) a step has as environment variables, not placeholders (lib/rebuilds/steps). */
const STEP_VARIABLES: Record<string, string> = {
  fence: "CLAIMWATCH_FENCE",
  runid: "CLAIMWATCH_RUN_ID",
  run: "CLAIMWATCH_RUN_ID",
};
/** Words of claimwatch's own vocabulary a step might expect as placeholders (compared folded). */
const CLAIMWATCH_WORDS = new Set(
  ["run", "runid", "job", "jobid", "attempt", "fence", "build", "buildhash", "hash", "claim", "input", "inputs"].concat(
    ["workdir", "outputdir", "outdir", "dir", "base", "current", "builds"],
  ),
);

/**
 * Whether an unknown `{word}` was surely meant as a placeholder: a known one in another case or
 * spelling (`{Version}`, `{wrk}`, `{tenat}`), cut short or lengthened (`{out}`, `{work_dir}`), or a
 * word of claimwatch's (`{fence}`, `{runId}`). The suggestion, or null for the program's own braces.
 */
function mistakenPlaceholder(word: string): string | null {
  const folded = word.toLowerCase().replace(/[_-]/g, "");
  for (const known of PLACEHOLDER_NAMES) {
    if (folded === known || (folded.length >= 3 && (known.startsWith(folded) || folded.startsWith(known)))) {
      return ` (did you mean {${known}}?)`;
    }
    if (folded.length >= 3 && nearMiss(folded, known)) return ` (did you mean {${known}}?)`;
  }
  const variable = STEP_VARIABLES[folded];
  if (variable) return ` (not a placeholder: a step reads it from $${variable})`;
  return CLAIMWATCH_WORDS.has(folded) ? "" : null;
}

const placeholderArg = z.string().superRefine((text, ctx) => {
  for (const [token, name] of text.matchAll(PLACEHOLDER_LIKE)) {
    if (KNOWN_PLACEHOLDERS.has(name!)) continue;
    const meant = mistakenPlaceholder(name!);
    if (meant === null) continue;
    ctx.addIssue({
      code: "custom",
      message: `unknown placeholder ${token}${meant}; the placeholders are ${PLACEHOLDER_LIST} (braces the program should see get a space inside: { ${name} })`,
    });
    return;
  }
});

const runStepSchema = z.strictObject({
  name: nameSchema("a step name"),
  run: z.array(placeholderArg).min(1, "must name a program: an argv array like [tar, -czf, out.tgz, dir]"),
  env: z
    .record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name"), placeholderArg)
    .optional(),
  cwd: placeholderArg.optional(),
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

const rebuildFields = z.strictObject({
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
});

const rebuildSchema = rebuildFields
  // Run even when another field of the rebuild is wrong (zod skips a refinement after any issue
  // by default), so one start names every problem of the file (black-box helper-131): each rule
  // looks only at fields that parsed, hence the loose view of the value.
  .superRefine((parsed, ctx) => checkRebuild(parsed as LooseRebuild, ctx), {
    when: (payload) => typeof payload.value === "object" && payload.value !== null,
  });

/** A rebuild's value as the cross-field rules see it: each field parsed, or anything. */
type LooseRebuild = { [K in keyof z.output<typeof rebuildFields>]?: unknown };
const isNumber = (value: unknown): value is number => typeof value === "number";
const fieldOf = (value: unknown, key: string): unknown =>
  typeof value === "object" && value !== null ? (value as Record<string, unknown>)[key] : undefined;

function checkRebuild(rebuild: LooseRebuild, ctx: z.RefinementCtx): void {
  // A field with an issue of its own holds its input, not its value; a field of an object with
  // an issue (an unknown key: `refresh_every` meant as `refreshEvery`) may hold a default the
  // operator did not mean (review helper-132). No rule looks at either.
  const issues = (ctx as unknown as { issues?: { path?: PropertyKey[] }[] }).issues ?? [];
  const onPath = (issuePath: readonly PropertyKey[], path: readonly PropertyKey[]) => {
    const shorter = Math.min(issuePath.length, path.length);
    return issuePath.slice(0, shorter).every((key, i) => key === path[i]);
  };
  const parsed = (...path: PropertyKey[]) => !issues.some((issue) => onPath(issue.path ?? [], path));
  const ttl = parsed("claim", "ttl") ? fieldOf(rebuild.claim, "ttl") : undefined;
  const refreshEvery = parsed("claim", "refreshEvery") ? fieldOf(rebuild.claim, "refreshEvery") : undefined;
  const timeLimit = parsed("timeLimit") ? rebuild.timeLimit : undefined;
  if (isNumber(timeLimit) && isNumber(ttl) && timeLimit <= ttl) {
    ctx.addIssue({
      code: "custom",
      path: ["timeLimit"],
      message: "must be longer than claim.ttl, or the run is killed while still holding a claim it cannot release",
    });
  }
  if (isNumber(refreshEvery) && isNumber(ttl) && refreshEvery > ttl / 2) {
    ctx.addIssue({
      code: "custom",
      path: ["claim", "refreshEvery"],
      message: "must be at most half of claim.ttl, so one missed refresh does not lose the claim",
    });
  }
  const steps = Array.isArray(rebuild.steps) ? (rebuild.steps as unknown[]) : [];
  const tenants = parsed("tenants") ? rebuild.tenants : null;
  if (tenants === undefined) {
    steps.forEach((step, i) => {
      // Only a step that parsed (its input may be anything: nested past what stringify takes).
      if (parsed("steps", i) && JSON.stringify(step ?? null).includes("{tenant}")) {
        ctx.addIssue({
          code: "custom",
          path: ["steps", i],
          message:
            "uses {tenant}, but this rebuild has no tenants (it would be empty): list them under tenants, or leave it out",
        });
      }
    });
  }
  const backoff = parsed("retries", "backoff") ? fieldOf(rebuild.retries, "backoff") : undefined;
  const maxBackoff = parsed("retries", "maxBackoff") ? fieldOf(rebuild.retries, "maxBackoff") : undefined;
  if (isNumber(backoff) && isNumber(maxBackoff) && backoff > maxBackoff) {
    ctx.addIssue({
      code: "custom",
      path: ["retries", "backoff"],
      message: `must be at most retries.maxBackoff (${formatDuration(maxBackoff)}): the first retry's wait, which doubles up to maxBackoff`,
    });
  }
  if (Array.isArray(tenants) && new Set(tenants).size !== tenants.length) {
    ctx.addIssue({ code: "custom", path: ["tenants"], message: "lists a tenant twice" });
  }
  const names = steps
    .filter((_, i) => parsed("steps", i, "name"))
    .map((step) => fieldOf(step, "name"))
    .filter((name) => typeof name === "string");
  if (new Set(names).size !== names.length) {
    ctx.addIssue({ code: "custom", path: ["steps"], message: "two steps share a name" });
  }
}

const retentionSchema = z.strictObject({
  /** Run records kept per rebuild, per tenant for a rebuild with tenants. */
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

/** One thing wrong in a definitions file: where (path inside it, line) and what. */
export interface DefinitionsProblem {
  /** Path inside the document (`rebuilds.parcels.claim.ttl`); empty for the file as a whole. */
  where: string;
  problem: string;
  /** 1-based line in the file, when known. */
  line?: number;
  /** The offending line of the file and a caret under the column, for YAML syntax errors. */
  excerpt?: string[];
}

/**
 * A definitions file that cannot be used, with every problem found in it (not only the first):
 * one line per problem, `file[:line]: where: problem`, a YAML syntax error followed by the
 * offending line. `where` and `problem` are the first problem's, for one-line reports.
 */
export class DefinitionsError extends Error {
  readonly where: string;
  readonly problem: string;
  constructor(
    readonly file: string,
    readonly problems: DefinitionsProblem[],
  ) {
    super(problems.map((p) => formatProblem(file, p)).join("\n"));
    this.name = "DefinitionsError";
    this.where = problems[0]?.where ?? "";
    this.problem = problems[0]?.problem ?? "";
  }
}

function formatProblem(file: string, { where, problem, line, excerpt }: DefinitionsProblem): string {
  const head = `${file}${line ? `:${line}` : ""}: ${where ? `${where}: ` : ""}${problem}`;
  return excerpt?.length ? [head, ...excerpt].join("\n") : head;
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

/** Where a path of the document starts in its file (1-based line), when the caller knows the text. */
export type LineOf = (path: PropertyKey[]) => number | undefined;

const EXAMPLE_REBUILD =
  "e.g.  rebuilds: { nightly: { output: data/builds/nightly, steps: [{ name: build, run: [make] }] } }";

/**
 * A union's issue, or — when the value plainly is one branch's kind — that branch's own issues,
 * at their full paths. zod reports "no branch matched" (the union's message) as soon as every
 * branch hit an aborting issue, so a rule written as a mapping with a bad `severity` would be told
 * it "must be false or a mapping". A branch fits when all its issues are inside the value (no
 * wrong type at the union's own path); among those, the one with the fewest unknown keys at the
 * top (a step with `run` is a run step, a receiver with `webhook:` a webhook). A tie, or no fit,
 * keeps the union's message: it says what the choices are.
 */
function unionBranchIssues(issue: z.core.$ZodIssue): z.core.$ZodIssue[] {
  if (issue.code !== "invalid_union" || issue.errors.length === 0) return [issue];
  let best: z.core.$ZodIssue[] | undefined;
  let bestUnknown = Infinity;
  let tie = false;
  for (const branch of issue.errors) {
    if (!branch.every((inner) => inner.path.length > 0 || inner.code === "unrecognized_keys")) continue;
    const unknown = branch.reduce(
      (sum, inner) => sum + (inner.path.length === 0 && inner.code === "unrecognized_keys" ? inner.keys.length : 0),
      0,
    );
    if (unknown < bestUnknown) [best, bestUnknown, tie] = [branch, unknown, false];
    else if (unknown === bestUnknown) tie = true;
  }
  if (!best || tie) return [issue];
  return best.flatMap((inner) => unionBranchIssues({ ...inner, path: [...issue.path, ...inner.path] }));
}

/** The zod issues of a document, as problems: every one of them, each with its own path. */
function schemaProblems(raw: unknown, issues: z.core.$ZodIssue[], lineOf: LineOf | undefined): DefinitionsProblem[] {
  const problems: DefinitionsProblem[] = [];
  const seen = new Set<string>();
  const all = issues.flatMap(unionBranchIssues);
  // A misspelt key (`outptu:`) is one problem, not two: the unknown key names the missing one it
  // was meant as, and that one is not reported as required on its own.
  const missing = all.filter(
    (issue) => issue.code === "invalid_type" && issue.path.length > 0 && valueAt(raw, issue.path) === undefined,
  );
  const meantAs = (parent: PropertyKey[], key: string): string | undefined => {
    for (const issue of missing) {
      const wanted = String(issue.path.at(-1));
      if (issuePath(issue.path.slice(0, -1)) !== issuePath(parent)) continue;
      if (meantAsKey(key.toLowerCase(), wanted.toLowerCase())) return wanted;
    }
    // An optional key (`evaluateEvery`, a rule's `for`) is never missing: name the one the
    // mapping can have and does not.
    return meantKey(definitionsFileSchema, parent, key, valueAt(raw, parent));
  };
  const suppressed = new Set<string>();
  for (const issue of all.filter((i) => i.code === "unrecognized_keys")) {
    for (const key of issue.keys) {
      const wanted = meantAs(issue.path, key);
      if (wanted) suppressed.add(issuePath([...issue.path, wanted]));
    }
  }
  for (const issue of all) {
    let message = issue.message;
    let linePath: PropertyKey[] = issue.path;
    if (issue.code === "invalid_type" && suppressed.has(issuePath(issue.path))) continue;
    if (issue.code === "unrecognized_keys") {
      message = `unknown key ${issue.keys
        .map((k) => {
          const wanted = meantAs(issue.path, k);
          return wanted ? `'${k}' (did you mean '${wanted}'?)` : `'${k}'`;
        })
        .join(", ")}`;
      if (issue.keys[0] !== undefined) linePath = [...issue.path, issue.keys[0]];
    }
    if (issue.code === "invalid_key") message = `invalid name: ${issue.issues[0]?.message ?? message}`;
    // zod says "expected string, received undefined" for a key that is not there at all.
    if (issue.code === "invalid_type" && valueAt(raw, issue.path) === undefined) {
      const what = issue.expected === "array" ? "list" : issue.expected;
      message = `is required (${/^[aeiou]/.test(what) ? "an" : "a"} ${what})`;
    }
    // YAML's word for an object; the whole file is one with a `rebuilds:` section.
    if (issue.code === "invalid_type" && issue.expected === "object") {
      message = message.replace(
        /^must be an object/,
        issue.path.length === 0 ? `must be a YAML mapping with a 'rebuilds:' section` : "must be a mapping",
      );
    }
    if (issue.path.length === 1 && issue.path[0] === "rebuilds" && valueAt(raw, issue.path) === undefined) {
      message = `is missing: the file must have a 'rebuilds:' section with at least one rebuild (${EXAMPLE_REBUILD})`;
    }
    const problem = { where: issuePath(issue.path), problem: oneLine(message), line: lineOf?.(linePath) };
    const key = `${problem.where}\u0000${problem.problem}`;
    if (seen.has(key)) continue;
    seen.add(key);
    problems.push(problem);
  }
  return problems;
}

/**
 * Validates already-parsed YAML/JSON. `file` is used in messages and to resolve relative paths;
 * `lineOf`, when given, puts the line of each problem in its message. Every problem is reported.
 */
export function parseDefinitions(raw: unknown, file: string, lineOf?: LineOf): DefinitionsResult {
  const shown = oneLine(path.basename(file));
  const refuse = (problems: DefinitionsProblem[]): DefinitionsResult => ({
    ok: false,
    // In file order, as an editor shows them (stable: one line's problems keep their order).
    error: new DefinitionsError(
      shown,
      [...problems].sort((a, b) => (a.line ?? Infinity) - (b.line ?? Infinity)),
    ),
  });
  const protoKey = findProtoKey(raw);
  if (protoKey) {
    return refuse([
      {
        where: issuePath(protoKey.slice(0, -1)),
        problem: "'__proto__' is not allowed as a key",
        line: lineOf?.(protoKey),
      },
    ]);
  }
  const problems: DefinitionsProblem[] = [];
  const declared = valueAt(raw, ["rebuilds"]);
  if (declared && typeof declared === "object" && !Array.isArray(declared) && Object.keys(declared).length === 0) {
    problems.push({
      where: "rebuilds",
      problem: `is empty: add at least one rebuild under 'rebuilds:' (${EXAMPLE_REBUILD}; README, "Rebuild definitions")`,
      line: lineOf?.(["rebuilds"]),
    });
  }
  const parsed = definitionsFileSchema.safeParse(raw ?? {});
  if (!parsed.success) return refuse([...problems, ...schemaProblems(raw, parsed.error.issues, lineOf)]);
  if (problems.length > 0) return refuse(problems);
  const baseDir = path.dirname(path.resolve(file));
  const rebuilds = new Map<string, RebuildDefinition>();
  const owners = new Map<string, string>();
  for (const [name, rebuild] of Object.entries(parsed.data.rebuilds)) {
    const where = `rebuilds.${name}.output`;
    const line = lineOf?.(["rebuilds", name, "output"]);
    const outputPath = path.resolve(baseDir, rebuild.output);
    const pinned = pinnedPath(outputPath);
    if (!pinned.ok) {
      problems.push({ where, line, problem: oneLine(`identity cannot be pinned: ${pinned.reason}`) });
      continue;
    }
    const claimPath = pinned.path;
    // The claim is named for the output (+ tenant): an output that makes no valid claim name
    // (the root directory, glob characters, …) is refused here, not when the first run starts.
    const unnamed = (rebuild.tenants ?? [undefined])
      .map((tenant) => tryClaimName(claimPath, tenant))
      .find((c) => !c.ok);
    if (unnamed && !unnamed.ok) {
      problems.push({ where, line, problem: oneLine(`cannot name a claim: ${unnamed.reason}`) });
      continue;
    }
    const owner = owners.get(claimPath);
    if (owner) {
      problems.push({
        where,
        line,
        problem: `is also the output of rebuild '${owner}'; two rebuilds must not share an output`,
      });
      continue;
    }
    const nested = [...owners.entries()].find(
      ([otherOutput]) => claimPath.startsWith(otherOutput + path.sep) || otherOutput.startsWith(claimPath + path.sep),
    );
    if (nested) {
      problems.push({
        where,
        line,
        problem: `is nested with the output of rebuild '${nested[1]}'; outputs must not contain each other`,
      });
      continue;
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
  if (problems.length > 0) return refuse(problems);
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

/** Why the process reads this file: said when it is missing. */
export type DefinitionsSource = { from: "CLAIMWATCH_CONFIG"; value: string } | { from: "default"; cwd: string };

/**
 * Reads and validates a definitions file. Every YAML syntax error is reported (with its line
 * shown), or else every schema problem; a missing file says where it looked and why.
 */
export function loadDefinitions(file: string, source?: DefinitionsSource): DefinitionsResult {
  const shown = oneLine(path.basename(file));
  let bytes: Buffer;
  try {
    // The size limit counts bytes, not characters (`é` is two): a file known too large is not read.
    const stat = fs.statSync(file);
    if (stat.isFile() && stat.size > MAX_DEFINITIONS_BYTES) {
      return { ok: false, error: new DefinitionsError(shown, [tooLargeProblem(stat.size)]) };
    }
    bytes = fs.readFileSync(file);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const problem =
      code === "ENOENT"
        ? `file not found (${whyThisFile(source)})`
        : code === "EISDIR"
          ? "is a directory; CLAIMWATCH_CONFIG must name the definitions file itself"
          : `cannot be read (${code})`;
    return { ok: false, error: new DefinitionsError(oneLine(file), [{ where: "", problem: oneLine(problem) }]) };
  }
  // Checked again on what was read: the file may have grown, or not be a regular file.
  if (bytes.length > MAX_DEFINITIONS_BYTES) {
    return { ok: false, error: new DefinitionsError(shown, [tooLargeProblem(bytes.length)]) };
  }
  const text = bytes.toString("utf8");
  const tooDeep = nestingProblem(text);
  if (tooDeep) return { ok: false, error: new DefinitionsError(shown, [tooDeep]) };
  const lines = new LineCounter();
  // logLevel "error": YAML warnings would otherwise go to stderr through process.emitWarning.
  const document = parseDocument(text, { uniqueKeys: true, logLevel: "error", lineCounter: lines });
  if (document.errors.length > 0) {
    const problems = yamlProblems(text, document.errors);
    return { ok: false, error: new DefinitionsError(shown, problems) };
  }
  let raw: unknown;
  try {
    raw = document.toJS({ maxAliasCount: 100 });
  } catch (error) {
    // Alias bombs and the like: yaml refuses them while building the value.
    const message = (error as Error).message.split("\n")[0] ?? "is not valid YAML";
    return {
      ok: false,
      error: new DefinitionsError(shown, [{ where: "", problem: oneLine(`is not valid YAML: ${message}`) }]),
    };
  }
  return parseDefinitions(raw, file, (trail) => lineOfPath(document, lines, trail));
}

/** Limits checked on the text before the YAML parser sees it (its composer recurses per level). */
const MAX_DEFINITIONS_BYTES = 2 * 1024 * 1024;
const MAX_FLOW_DEPTH = 64;
const MAX_INDENT_COLUMNS = 512;

/** A file over the size limit, in bytes as on disk (README: "A file over 2 MiB … is refused"). */
function tooLargeProblem(bytes: number): DefinitionsProblem {
  return { where: "", problem: `is ${bytes} bytes; the limit is ${MAX_DEFINITIONS_BYTES} (2 MiB)` };
}

/**
 * Text nested too deep for the YAML parser to go through safely: thousands of `[` overflow its
 * stack, and an overflow inside V8's regexp compiler is not an exception but a fatal "out of
 * memory" (the fuzzer found it). A cheap scan — flow brackets outside quotes and comments, and
 * indentation — refuses such text first, at the line where it goes too deep. (The size limit is
 * checked on the bytes, before they are decoded: loadDefinitions.)
 */
function nestingProblem(text: string): DefinitionsProblem | null {
  const deepIndent = new RegExp(`^ {${MAX_INDENT_COLUMNS + 1}}`, "m").exec(text);
  if (deepIndent) {
    const { line } = positionAt(text, deepIndent.index);
    return { where: "", line, problem: `is indented more than ${MAX_INDENT_COLUMNS} columns` };
  }
  let depth = 0;
  let tooDeepAt = -1;
  forEachFlowBracket(text, text.length, (bracket, i) => {
    if (bracket === "[" || bracket === "{") {
      if (++depth <= MAX_FLOW_DEPTH) return false;
      tooDeepAt = i;
      return true;
    }
    if (depth > 0) depth--;
    return false;
  });
  if (tooDeepAt < 0) return null;
  const { line } = positionAt(text, tooDeepAt);
  return { where: "", line, problem: `nests [ ] and { } more than ${MAX_FLOW_DEPTH} levels deep` };
}

/**
 * Calls `each` with every flow bracket (`[ ] { }`) before `end` that is outside quoted scalars
 * and comments, until it returns true. A quote opens a quoted scalar only where a value starts
 * (not the apostrophe in a plain word) and is taken as closed at the end of its line.
 */
function forEachFlowBracket(text: string, end: number, each: (bracket: string, offset: number) => boolean): void {
  let quote: string | null = null;
  for (let i = 0; i < end; i++) {
    const c = text[i]!;
    if (quote) {
      if (c === quote || c === "\n") quote = null;
      else if (quote === '"' && c === "\\") i++;
      continue;
    }
    if (c === "#" && (i === 0 || /\s/.test(text[i - 1]!))) {
      while (i < end && text[i] !== "\n") i++;
      continue;
    }
    if ((c === "'" || c === '"') && (i === 0 || /[\s[{,:]/.test(text[i - 1]!))) quote = c;
    else if ((c === "[" || c === "{" || c === "]" || c === "}") && each(c, i)) return;
  }
}

/** 1-based line and column of `offset` in `text`. */
function positionAt(text: string, offset: number): { line: number; column: number } {
  const before = text.slice(0, offset).split(/\r?\n|\r/);
  return { line: before.length, column: (before.at(-1)?.length ?? 0) + 1 };
}

function whyThisFile(source: DefinitionsSource | undefined): string {
  if (!source) return "set CLAIMWATCH_CONFIG";
  if (source.from === "CLAIMWATCH_CONFIG") {
    return `CLAIMWATCH_CONFIG=${source.value} names it; fix the path, or unset CLAIMWATCH_CONFIG to use ./claimwatch.yaml`;
  }
  return `CLAIMWATCH_CONFIG is not set, so ./claimwatch.yaml in the working directory ${source.cwd} is used; run from the directory that has claimwatch.yaml or set CLAIMWATCH_CONFIG`;
}

const MAX_YAML_PROBLEMS = 20;

/**
 * YAML syntax errors as problems at the line a person would fix: an error reported at a blank
 * line (the end of the file, for an unclosed bracket or quote) moves to the line that opened
 * what is unclosed, and the message loses yaml's "at line L, column C:" tail.
 */
function yamlProblems(text: string, errors: YAMLError[]): DefinitionsProblem[] {
  const fileLines = text.split(/\r?\n|\r/);
  const problems: DefinitionsProblem[] = [];
  const seenLines = new Set<number>();
  for (const error of errors.slice(0, MAX_YAML_PROBLEMS)) {
    const message = (error.message.split("\n")[0] ?? "").replace(/ at line \d+, column \d+:?\s*$/, "").trim();
    let { line, column } = errorPosition(error, text);
    if (/^Flow (sequence|map)/.test(message)) {
      const opener = unclosedOpener(text, error.pos[0], message.startsWith("Flow map") ? "{" : "[");
      if (opener) ({ line, column } = opener);
    } else if (/^Missing closing .?quote/.test(message)) {
      const opener = unclosedQuote(text, error.pos[0]);
      if (opener) ({ line, column } = opener);
    }
    while (line > 1 && (fileLines[line - 1] ?? "").trim() === "") {
      line -= 1;
      column = (fileLines[line - 1] ?? "").length + 1;
    }
    if (seenLines.has(line)) continue;
    seenLines.add(line);
    const source = oneLine(fileLines[line - 1] ?? "").slice(0, 200);
    const gutter = `${line} | `;
    problems.push({
      where: "",
      line,
      problem: oneLine(`is not valid YAML: ${message || "syntax error"}`),
      excerpt: [
        `    ${gutter}${source}`,
        `    ${" ".repeat(gutter.length)}${" ".repeat(Math.max(0, Math.min(column - 1, source.length)))}^`,
      ],
    });
  }
  return problems;
}

function errorPosition(error: YAMLError, text: string): { line: number; column: number } {
  if (error.linePos) return { line: error.linePos[0].line, column: error.linePos[0].col };
  return positionAt(text, error.pos[0]);
}

/** The line and column of the last `open` bracket before `offset` that nothing closes (quotes skipped). */
function unclosedOpener(text: string, offset: number, open: "[" | "{"): { line: number; column: number } | null {
  const close = open === "[" ? "]" : "}";
  const stack: number[] = [];
  forEachFlowBracket(text, Math.min(offset, text.length), (bracket, i) => {
    if (bracket === open) stack.push(i);
    else if (bracket === close) stack.pop();
    return false;
  });
  const at = stack.at(-1);
  return at === undefined ? null : positionAt(text, at);
}

/**
 * The line and column of the quote that opens the quoted scalar running to `offset`: yaml reports
 * an unclosed quote where the text it swallowed ends, often many lines below the quote.
 */
function unclosedQuote(text: string, offset: number): { line: number; column: number } | null {
  let start: number | undefined;
  const consider = (token: CST.Token | undefined) => {
    if (token && (token.type === "double-quoted-scalar" || token.type === "single-quoted-scalar")) {
      if (token.offset <= offset && token.offset + token.source.length >= offset) start = token.offset;
    }
  };
  for (const token of new Parser().parse(text)) {
    if (token.type !== "document") continue;
    consider(token.value);
    CST.visit(token, (item) => {
      consider(item.key ?? undefined);
      consider(item.value);
    });
  }
  if (start === undefined) return null;
  return positionAt(text, start);
}

/**
 * The line where `trail` (a path into the document) starts: the key of the deepest pair that
 * exists along it, so a missing or misspelt key points at its parent.
 */
function lineOfPath(document: Document, lines: LineCounter, trail: PropertyKey[]): number | undefined {
  let node: unknown = document.contents;
  let offset: number | undefined = (node as { range?: [number, number, number] } | null)?.range?.[0];
  for (const part of trail) {
    if (isMap(node)) {
      const pair = node.items.find((item) => isScalar(item.key) && String(item.key.value) === String(part));
      if (!pair) break;
      offset = (pair.key as { range?: [number, number, number] }).range?.[0] ?? offset;
      node = pair.value;
    } else if (isSeq(node) && typeof part === "number") {
      const item = node.items[part] as { range?: [number, number, number] } | undefined;
      if (!item) break;
      offset = item.range?.[0] ?? offset;
      node = item;
    } else {
      break;
    }
  }
  return offset === undefined ? undefined : lines.linePos(offset).line;
}

/**
 * Where one tenant's builds live: `<output>/<tenant>` (tenant names are plain path segments),
 * or `<output>` itself for a rebuild without tenants. Each tenant has its own claim, fence,
 * published pointer — and so its own `builds/` and `current`.
 */
export function outputDirOf(rebuild: Pick<RebuildDefinition, "outputPath">, tenant: string | undefined): string {
  return tenant ? path.join(rebuild.outputPath, tenant) : rebuild.outputPath;
}

/**
 * The one tenant check (trigger, API, worker, CLI): null when `tenant` fits the rebuild — one of
 * its tenants, or none for a rebuild without tenants — else why not, in one line that lists the
 * valid tenants.
 */
export function tenantProblem(rebuild: RebuildDefinition, tenant: string | undefined): string | null {
  if (rebuild.tenants) {
    if (tenant === undefined) return `rebuild '${rebuild.name}' needs a tenant, one of: ${rebuild.tenants.join(", ")}`;
    return rebuild.tenants.includes(tenant)
      ? null
      : `'${oneLine(tenant).slice(0, 80)}' is not a tenant of rebuild '${rebuild.name}'; its tenants: ${rebuild.tenants.join(", ")}`;
  }
  return tenant === undefined ? null : `rebuild '${rebuild.name}' has no tenants (leave out the tenant)`;
}

/** The one "unknown rebuild" message: names the valid rebuilds. */
export function unknownRebuildProblem(definitions: Pick<Definitions, "rebuilds">, name: string): string {
  const known = [...definitions.rebuilds.keys()];
  return `no rebuild named '${oneLine(name).slice(0, 80)}'; rebuilds: ${known.join(", ") || "(none)"}`;
}

/** Why a rebuild without a schedule cannot be paused or resumed, naming the ones that have one. */
export function noScheduleProblem(definitions: Pick<Definitions, "rebuilds">, name: string): string {
  const scheduled = [...definitions.rebuilds.values()].filter((d) => d.schedule).map((d) => d.name);
  return `rebuild '${name}' has no schedule (it runs on demand only); scheduled rebuilds: ${scheduled.join(", ") || "(none)"}`;
}

/** The claim-relevant tenants of a rebuild: its tenants, or one unnamed "tenant". */
export function tenantsOf(rebuild: RebuildDefinition): (string | undefined)[] {
  return rebuild.tenants ?? [undefined];
}

/** JSON Schema of the definitions file, for editor completion (`claimwatch.schema.json`). */
export function definitionsJsonSchema(): object {
  return z.toJSONSchema(definitionsFileSchema, { io: "input", unrepresentable: "any" });
}

/** For process entry points: load, or print every problem (one line each) and exit 2. */
export function loadDefinitionsOrExit(file: string, processName: string, source?: DefinitionsSource): Definitions {
  const result = loadDefinitions(file, source);
  if (result.ok) return result.definitions;
  process.stderr.write(`${describeDefinitionsError(result.error, `${processName}: definitions error: `)}\n`);
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

/**
 * How long a holder may run on after it last knew it held its claim: the claim's TTL (its local
 * deadline), then its steps' stop grace. Its holding mark says so (holding-marks.ts).
 */
export function holdAfterLastRefreshMs(rebuild: Pick<RebuildDefinition, "steps" | "claim">): number {
  return rebuild.claim.ttl + stopWithinMs(rebuild);
}

/** The error's lines, each problem prefixed (an excerpt of the file follows its problem unprefixed). */
export function describeDefinitionsError(error: DefinitionsError, prefix: string): string {
  return error.problems
    .flatMap(({ excerpt, ...problem }) => [`${prefix}${formatProblem(error.file, problem)}`, ...(excerpt ?? [])])
    .join("\n");
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

/**
 * What a worker's stop may take after its jobs' wait: its last words to Redis (queue close,
 * retire, `worker.down`: 2 s at most, side by side) and QUIT (1 s), each bounded so a frozen
 * Redis cannot hold the exit. Whoever stops a worker waits `shutdownWaitMs + STOP_AFTER_JOBS_MS`
 * before a SIGKILL (npm start does).
 */
export const STOP_AFTER_JOBS_MS = 5_000;
