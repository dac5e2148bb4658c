/**
 * Redis connections. Each process opens few, long-lived clients; the option sets differ by use:
 * - `worker`: BullMQ needs `maxRetriesPerRequest: null` (commands wait through reconnects).
 * - `claims`: the worker's claims connection; every command is bounded in time.
 * - `web`: a request handler fails within seconds (one reconnect try, `commandTimeout`) rather
 *   than waiting for Redis to come back.
 * - `probe`: health checks; every command is bounded by `commandTimeout`.
 */
import { Redis, type RedisOptions } from "ioredis";
import { describeError } from "../describe-error";
import { settledWithin } from "../settled-within";
import { connectionOptionsOf, redisTargetOf } from "./url";

export type ClientRole = "worker" | "claims" | "web" | "probe";

const roleOptions: Record<ClientRole, RedisOptions> = {
  worker: { maxRetriesPerRequest: null, enableReadyCheck: true },
  // The worker's claims connection: a refresh must fail within seconds during an outage, so the
  // claim keeper can retry it and, failing that, abort at its local deadline.
  claims: { maxRetriesPerRequest: 1, commandTimeout: 2_000, connectTimeout: 2_000 },
  web: { maxRetriesPerRequest: 1, connectTimeout: 2_000, commandTimeout: 5_000 },
  // Commands wait for a (re)connect, but never longer than commandTimeout: a probe made right
  // after start-up succeeds, and one made while Redis is down fails in bounded time.
  probe: {
    maxRetriesPerRequest: 0,
    connectTimeout: 1_000,
    commandTimeout: 1_500,
    retryStrategy: () => 1_000,
  },
};

/**
 * A client for `url` in any form lib/redis/url.ts accepts (one server, TLS, ACL user, Sentinel
 * group). BullMQ's blocking connections are `duplicate()`s of the client handed to it, so they
 * inherit the same target (sentinels included), credentials and TLS.
 */
export function createRedis(url: string, role: ClientRole, name = "claimwatch"): Redis {
  const { url: direct, options } = connectionOptionsOf(redisTargetOf(url));
  const all: RedisOptions = { ...options, ...roleOptions[role], connectionName: name, lazyConnect: false };
  const client = direct === undefined ? new Redis(all) : new Redis(direct, all);
  // ioredis emits "error" on every failed reconnect; without a listener Node prints each one as
  // an unhandled error event. Callers see failures through their commands instead, described
  // with the last connection error kept here (`describeRedisFailure`).
  client.on("error", (error: unknown) => lastConnectionErrors.set(client, describeError(error)));
  client.on("ready", () => lastConnectionErrors.delete(client));
  return client;
}

/** Why each client's last connection attempt failed ("connect ECONNREFUSED 127.0.0.1:6380"), until it connects. */
const lastConnectionErrors = new WeakMap<object, string>();

/**
 * A failed command in one line. A command refused because there is no connection says only that
 * ("Reached the max retries per request limit", "Connection is closed"): then the connection's
 * own error names the address and the cause, or, before it has one, "no connection (reconnecting)"
 * (ioredis's words name its options, which mean nothing to an operator).
 */
export function describeRedisFailure(client: object, error: unknown): string {
  const described = describeError(error);
  const connection = lastConnectionErrors.get(client);
  // A command that timed out on a client that is not connected (a Sentinel group that names no
  // such master, a refused password: its sentinels are asked until the command's timeout) waited
  // for the connection, not for the server.
  const notConnected = (client as { status?: string }).status !== "ready";
  const noConnection =
    (error instanceof Error && error.name === "MaxRetriesPerRequestError") ||
    /Connection is closed|Stream isn't writeable|max retries per request/i.test(described) ||
    (notConnected && connection !== undefined && /Command timed out/.test(described));
  if (!noConnection) return described;
  return connection ? `no connection: ${connection}` : "no connection (reconnecting)";
}

/** How long `closeRedis` waits for the server's answer to QUIT before dropping the connection. */
export const QUIT_WAIT_MS = 2_000;

/**
 * Closes a client without waiting on a server that may be gone or frozen: QUIT (so the commands
 * already sent are answered first) for at most `waitMs`, then the socket is dropped. A frozen
 * server (SIGSTOP, a hung host) takes the QUIT into its socket buffer and never answers; without
 * the bound, a worker's stop waited on it for good.
 */
export async function closeRedis(client: Redis | undefined, waitMs = QUIT_WAIT_MS): Promise<void> {
  if (!client) return;
  if (client.status !== "ready") {
    client.disconnect();
    return;
  }
  await settledWithin(client.quit(), waitMs);
  // Unanswered, or refused: a client with a commandTimeout rejects the QUIT of a frozen server
  // ("Command timed out") and stays connected. Commands already written still reach the server
  // (ioredis half-closes the socket); only their answers are not waited for.
  // (`status` is read again: the QUIT above may have ended the connection.)
  if ((client.status as string) !== "end") client.disconnect();
}
