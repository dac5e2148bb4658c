/**
 * What a CLI command works with, found as the server finds it: the environment (lib/config), the
 * definitions file, and the Redis servers — `REDIS_URL` / `CLAIMS_REDIS_URL` when set, else the
 * embedded Redis that `npm start` recorded in `CLAIMWATCH_DATA_DIR`. Each failure is a
 * `CliFailure` that says where it looked.
 */
import { auditRefused, actorOf } from "../lib/api/handler";
import type { AuditAction } from "../lib/audit";
import { takeToken } from "../lib/auth/rate-limit";
import { identifyShellOperator } from "../lib/auth/shell-identity";
import { parseConfig, type Config } from "../lib/config";
import { describeRedisFailure } from "../lib/redis/client";
import { describeDefinitionsError, loadDefinitions, type Definitions } from "../lib/rebuilds/definitions";
import { RedisNotConfiguredError, type RedisUrls } from "../lib/redis/connections";
import { redactRedisUrl } from "../lib/redis/url";
import { openContext, type WebContext } from "../lib/web/context";
import { ApiError } from "../lib/http/errors";
import { CliFailure, EXIT } from "./outcome";
import { isRedisUnavailable as redisUnavailable } from "../lib/redis/unavailable";

export interface Setup {
  config: Config;
  definitions: Definitions;
}

export type CliContext = WebContext & { close(): Promise<void> };

export function loadSetup(): Setup {
  const parsed = parseConfig(process.env);
  if (!parsed.ok) throw new CliFailure(EXIT.usage, "config", `configuration error: ${parsed.error.message}`);
  const config = parsed.config;
  const loaded = loadDefinitions(config.definitionsPath, config.definitionsSource);
  if (!loaded.ok) {
    throw new CliFailure(EXIT.usage, "definitions", describeDefinitionsError(loaded.error, "definitions error: "));
  }
  return { config, definitions: loaded.definitions };
}

/** Where the Redis URL came from, for messages. */
export function describeSource(urls: RedisUrls): string {
  return urls.source.from === "REDIS_URL"
    ? "from REDIS_URL"
    : `the embedded Redis (pid ${urls.source.pid}) recorded in ${urls.source.stateFile}`;
}

/** Opens the clients without asking Redis anything (`status` reports an outage itself). */
export function openCliContext(setup: Setup): CliContext {
  try {
    return openContext(setup.config, setup.definitions, "claimwatch-cli");
  } catch (error) {
    if (error instanceof RedisNotConfiguredError) throw new CliFailure(EXIT.redis, "redis-not-found", error.message);
    throw error;
  }
}

const PING_DEADLINE_MS = 3_000;

/** Opens the clients and checks that both Redis servers answer, within a few seconds. */
export async function connect(setup: Setup): Promise<CliContext> {
  const context = openCliContext(setup);
  const { urls, main, claims } = context.connections;
  const claimsSource =
    urls.claimsFrom === "CLAIMS_REDIS_URL"
      ? "from CLAIMS_REDIS_URL"
      : `DB 1 of the main Redis, ${describeSource(urls)}`;
  for (const [label, client, url, source] of [
    ["Redis", main, urls.main, describeSource(urls)],
    ["Claims Redis", claims, urls.claims, claimsSource],
  ] as const) {
    try {
      await Promise.race([
        client.ping(),
        new Promise((_, reject) =>
          setTimeout(() => reject(new Error(`no answer within ${PING_DEADLINE_MS} ms`)), PING_DEADLINE_MS).unref(),
        ),
      ]);
    } catch (error) {
      await context.close();
      const shown = redactRedisUrl(url);
      throw new CliFailure(
        EXIT.redis,
        "redis-unreachable",
        `${label} at ${shown} (${source}) does not answer: ${describeRedisFailure(client, error)}`,
      );
    }
  }
  // A trigger's queued time, a schedule's next tick: on the Redis clock (lib/redis/clock.ts).
  await context.clockReady();
  return context;
}

/** Errors that mean Redis went away mid-command (as lib/api/errors maps them to 503). */
export function isRedisUnavailable(error: unknown): boolean {
  return redisUnavailable(error);
}

/**
 * The operator running a mutation, as the audit log names them (`name (operator) via cli`). A
 * refused identity is audited like the API's refusals, then ends the command with exit 2.
 */
export async function operatorActor(
  context: CliContext,
  action: AuditAction,
  detail: Record<string, unknown>,
): Promise<string> {
  const found = identifyShellOperator(context.config, process.env);
  const actor = `${actorOf(found.identity)} via cli`;
  const refuse = (reason: string) =>
    auditRefused(context, action, actor, reason, { ...detail, via: "cli" }).catch(() => {});
  if (!found.ok) {
    await refuse(found.problem);
    throw new CliFailure(EXIT.usage, "no-identity", found.problem);
  }
  // The API's limit per identity (30 mutations a minute) holds from a shell as well.
  const limit = await takeToken(context.connections.main, context.connections.keys, action, found.identity.name);
  if (!limit.allowed) {
    const message = `too many ${action} requests; retry in ${Math.ceil(limit.retryAfterMs / 1000)} s`;
    await refuse(`rate limited (${message})`);
    throw new CliFailure(EXIT.refused, "rate-limited", message);
  }
  return actor;
}

/**
 * Runs an operator action's lib/api call as the route wrapper does: a refusal it throws (an
 * ApiError below 500: unknown job or run, a bad value) is audited as refused, once, then passed
 * on. Refusals the lib records itself come back as data, not as errors, so they are not audited
 * twice.
 */
export async function auditingRefusals<T>(
  context: CliContext,
  action: AuditAction,
  actor: string,
  detail: Record<string, unknown>,
  call: () => Promise<T>,
): Promise<T> {
  try {
    return await call();
  } catch (error) {
    if (error instanceof ApiError && error.status < 500) {
      await auditRefused(context, action, actor, `${error.status} ${error.code}: ${error.message}`, {
        ...detail,
        via: "cli",
      }).catch(() => {});
    }
    throw error;
  }
}
