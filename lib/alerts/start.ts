/**
 * Starting the alert evaluator in a worker or dashboard process. Nothing starts when the
 * definitions file has no `alerts:` section. Never throws: alerting must not stop a process.
 */
import type { Queue } from "bullmq";
import type { Redis } from "ioredis";
import type { Config } from "../config";
import type { Definitions } from "../rebuilds/definitions";
import type { RedisKeys } from "../redis/keys";
import { receiverEnvWarnings } from "./config";
import { AlertEvaluator } from "./evaluator";
import type { EvaluatorRole } from "./evaluator-claim";

export interface StartAlertingOptions {
  main: Redis;
  claims: Redis;
  keys: RedisKeys;
  definitions: Definitions;
  /** The rebuild queue (its job schedulers: the schedules as they tick). */
  schedulers: Pick<Queue, "getJobSchedulers">;
  config: Config;
  workerId?: string;
  role: EvaluatorRole;
  log: (line: string) => void;
}

/** The dashboard's origin for links: CLAIMWATCH_PUBLIC_URL, else its own address. */
export function publicOriginOf(config: Pick<Config, "publicOrigin" | "host" | "port">): string {
  if (config.publicOrigin) return config.publicOrigin;
  const host = config.host === "0.0.0.0" || config.host === "::" ? "127.0.0.1" : config.host;
  return `http://${host.includes(":") && !host.startsWith("[") ? `[${host}]` : host}:${config.port}`;
}

export function startAlerting(options: StartAlertingOptions): AlertEvaluator | null {
  const alerts = options.definitions.alerts;
  if (!alerts) return null;
  for (const warning of receiverEnvWarnings(alerts, process.env)) options.log(`warning: ${warning}`);
  const evaluator = new AlertEvaluator({
    main: options.main,
    claims: options.claims,
    keys: options.keys,
    definitions: options.definitions,
    schedulers: options.schedulers,
    config: alerts,
    publicOrigin: publicOriginOf(options.config),
    workerId: options.workerId,
    role: options.role,
    log: options.log,
  });
  evaluator.start();
  return evaluator;
}
