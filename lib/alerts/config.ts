/**
 * The `alerts:` section of claimwatch.yaml: receivers (Alertmanager, Slack, a signed webhook) and
 * rules. Every rule is on by default with the values below; `false` turns one off. Secrets are
 * never in the file: a receiver names the environment variable that holds them.
 *
 * Without an `alerts:` section no process evaluates alerts (the Alerts page says so); `alerts: {}`
 * turns evaluation on with every default.
 */
import { z } from "zod";
import { timerDurationSchema } from "../rebuilds/duration";

const SEVERITIES = ["critical", "warning", "info"] as const;
export type Severity = (typeof SEVERITIES)[number];
const severity = (fallback: Severity) =>
  z.enum(SEVERITIES, { error: "must be one of critical, warning, info" }).default(fallback);

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const envName = z.string().regex(ENV_NAME, "must be an environment variable name like SLACK_WEBHOOK_URL");
const RECEIVER_NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;
const receiverName = z
  .string()
  .regex(RECEIVER_NAME, "must be 1-64 letters, digits, '_' or '-', starting with a letter or digit");

const httpUrl = z.string().refine((value) => {
  try {
    const url = new URL(value);
    return (url.protocol === "http:" || url.protocol === "https:") && url.hostname !== "";
  } catch {
    return false;
  }
}, "must be an http(s) URL like http://alertmanager:9093");

const receiverSchema = z.union(
  [
    z.strictObject({
      alertmanager: z.strictObject({ url: httpUrl, name: receiverName.optional() }),
    }),
    z.strictObject({
      slack: z.strictObject({ webhookUrlEnv: envName, name: receiverName.optional() }),
    }),
    z.strictObject({
      webhook: z.strictObject({ url: httpUrl, secretEnv: envName, name: receiverName.optional() }),
    }),
  ],
  {
    error: "a receiver is exactly one of alertmanager: {url}, slack: {webhookUrlEnv} or webhook: {url, secretEnv}",
  },
);

/** A rule: its settings, or `false` to turn it off. */
const rule = <T extends z.ZodRawShape>(shape: T) =>
  z.union([z.literal(false), z.strictObject(shape)], {
    error: "must be false (the rule is off) or a mapping of its settings, e.g. {} for the defaults",
  });

const rulesSchema = z.strictObject({
  /** A claim stale (refresh overdue, or its holder worker gone) for this long. */
  claimStale: rule({ for: timerDurationSchema.default(300_000), severity: severity("critical") }).default({
    for: 300_000,
    severity: "critical",
  }),
  /** This many consecutive skips of one rebuild (+ tenant). */
  skips: rule({ atLeast: z.number().int().min(1).max(1_000_000).default(3), severity: severity("warning") }).default({
    atLeast: 3,
    severity: "warning",
  }),
  /** The newest finished run of a rebuild (+ tenant) failed for good (no retry left). */
  runFailed: rule({ severity: severity("critical") }).default({ severity: "critical" }),
  /** A run running longer than this (per rebuild: `rebuilds.<name>.alerts.runLong.over`). */
  runLong: rule({ over: timerDurationSchema.default(7_200_000), severity: severity("warning") }).default({
    over: 7_200_000,
    severity: "warning",
  }),
  /** A scheduled tick without a run this long after it. */
  scheduleMissed: rule({ grace: timerDurationSchema.default(600_000), severity: severity("critical") }).default({
    grace: 600_000,
    severity: "critical",
  }),
  /** A claim taken over from a dead holder; an event, so it resolves by itself after `resolveAfter`. */
  takeover: rule({ resolveAfter: timerDurationSchema.default(1_800_000), severity: severity("info") }).default({
    resolveAfter: 1_800_000,
    severity: "info",
  }),
  /** No live worker for this long. */
  workerMissing: rule({ for: timerDurationSchema.default(60_000), severity: severity("critical") }).default({
    for: 60_000,
    severity: "critical",
  }),
  /** A Redis that evicts keys or does not persist. */
  redisUnsafe: rule({ severity: severity("critical") }).default({ severity: "critical" }),
});

export const alertsSchema = z
  .strictObject({
    receivers: z.array(receiverSchema).max(20, "at most 20 receivers").default([]),
    rules: rulesSchema.default(rulesSchema.parse({})),
    /** How often the evaluating process looks at Redis. */
    evaluateEvery: timerDurationSchema.default(15_000),
    /** Firing alerts are posted to Alertmanager again this often (it forgets alerts not re-sent). */
    repeatEvery: timerDurationSchema.default(60_000),
  })
  .superRefine((alerts, ctx) => {
    const names = new Set<string>();
    alerts.receivers.forEach((receiver, i) => {
      const name = receiverNameOf(receiver, alerts.receivers);
      if (names.has(name)) {
        ctx.addIssue({ code: "custom", path: ["receivers", i], message: `two receivers are named '${name}'` });
      }
      names.add(name);
    });
    if (alerts.evaluateEvery < 1_000) {
      ctx.addIssue({ code: "custom", path: ["evaluateEvery"], message: "must be at least 1s" });
    }
    if (alerts.repeatEvery < alerts.evaluateEvery) {
      ctx.addIssue({ code: "custom", path: ["repeatEvery"], message: "must be at least evaluateEvery" });
    }
  });

/** `rebuilds.<name>.alerts`: per-rebuild overrides. */
export const rebuildAlertsSchema = z.strictObject({
  runLong: rule({ over: timerDurationSchema }).optional(),
});

type RawReceiver = z.output<typeof receiverSchema>;
export type AlertsConfig = z.output<typeof alertsSchema>;
export type AlertRules = AlertsConfig["rules"];
export type RuleName = keyof AlertRules;
export const RULE_NAMES = Object.keys(rulesSchema.shape) as RuleName[];

export type Receiver =
  | { kind: "alertmanager"; name: string; url: string }
  | { kind: "slack"; name: string; webhookUrlEnv: string }
  | { kind: "webhook"; name: string; url: string; secretEnv: string };

function receiverNameOf(receiver: RawReceiver, all: readonly RawReceiver[]): string {
  const [kind, settings] = Object.entries(receiver)[0] as [Receiver["kind"], { name?: string }];
  if (settings.name) return settings.name;
  const sameKind = all.filter((r) => kind in r);
  return sameKind.length === 1 ? kind : `${kind}-${sameKind.indexOf(receiver) + 1}`;
}

/** The receivers with their names: `name`, else the kind (`slack`), numbered when a kind repeats. */
export function receiversOf(alerts: AlertsConfig): Receiver[] {
  return alerts.receivers.map((receiver) => {
    const name = receiverNameOf(receiver, alerts.receivers);
    if ("alertmanager" in receiver) return { kind: "alertmanager", name, url: receiver.alertmanager.url };
    if ("slack" in receiver) return { kind: "slack", name, webhookUrlEnv: receiver.slack.webhookUrlEnv };
    return { kind: "webhook", name, url: receiver.webhook.url, secretEnv: receiver.webhook.secretEnv };
  });
}

/**
 * One line per receiver whose secret variable is unset (or empty) in `env`. Not a definitions
 * error: the file is shared by every process (CLI commands too) while the secret lives in each
 * evaluating process's environment, and alerting must not stop a worker. Delivery refuses
 * without the secret (a webhook is never sent unsigned) and records why on the Alerts page; this
 * says so at start, before the first alert.
 */
export function receiverEnvWarnings(alerts: AlertsConfig, env: Readonly<Record<string, string | undefined>>): string[] {
  const warnings: string[] = [];
  for (const receiver of receiversOf(alerts)) {
    if (receiver.kind === "alertmanager") continue;
    const [variable, setting, consequence] =
      receiver.kind === "slack"
        ? [receiver.webhookUrlEnv, "webhookUrlEnv", "nothing is sent"]
        : [receiver.secretEnv, "secretEnv", "nothing is sent unsigned"];
    const value = env[variable];
    if (value && receiver.kind === "slack" && !isHttpUrl(value)) {
      // Not echoed: the URL is the secret.
      warnings.push(
        `alerts: receiver '${receiver.name}': ${variable} (${setting}) is not an http(s) URL; its deliveries fail (nothing is sent) while this process evaluates`,
      );
      continue;
    }
    if (value) continue;
    warnings.push(
      `alerts: receiver '${receiver.name}': ${variable} (${setting}) is not set in this process's environment; its deliveries fail (${consequence}) while this process evaluates`,
    );
  }
  return warnings;
}

function isHttpUrl(value: string): boolean {
  try {
    const url = new URL(value);
    return url.protocol === "https:" || url.protocol === "http:";
  } catch {
    return false;
  }
}
