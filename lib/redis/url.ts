/**
 * The Redis URL forms claimwatch accepts (`REDIS_URL`, `CLAIMS_REDIS_URL`), and the ioredis
 * options each one becomes. One parser, used by the config check at start-up and by every place
 * that opens a client, so a URL that passed the check is the URL that is dialled.
 *
 * - `redis://[[user]:password@]host[:port][/db]`: one server; `user` is an ACL user (Redis 6+).
 * - `rediss://…`: the same over TLS; the server's certificate is verified against Node's CAs
 *   (add a private CA with `NODE_EXTRA_CA_CERTS=/path/ca.pem`).
 * - `redis+sentinel://[[user]:password@]host[:port][,host[:port]…]/mastername[/db]`: the primary
 *   of the Sentinel group `mastername`, asked of these sentinels (port 26379 when omitted).
 *   `user`/`password` are for the data nodes (primary and replicas); sentinels that need their
 *   own credentials take `?sentinelUsername=…&sentinelPassword=…`. Clients always talk to the
 *   primary (no `?role=`) and follow a failover: they re-ask the sentinels on a lost connection
 *   and on a READONLY reply from a demoted primary.
 *   TLS to Sentinel groups is not supported (`rediss+sentinel://` is refused).
 */
import type { RedisOptions } from "ioredis";

export const SENTINEL_PROTOCOL = "redis+sentinel:";
export const DEFAULT_SENTINEL_PORT = 26379;
/** Logical databases a stock Redis has (`databases 16`). */
const DB = /^(?:[0-9]|1[0-5])$/;
const MASTER_NAME = /^[A-Za-z0-9._-]{1,128}$/;

export interface SentinelTarget {
  kind: "sentinel";
  sentinels: { host: string; port: number }[];
  /** The Sentinel master group name (`sentinel monitor <name> …`). */
  name: string;
  db: number;
  username?: string;
  password?: string;
  sentinelUsername?: string;
  sentinelPassword?: string;
}

/** A single server: ioredis parses the URL itself (user, password, db, `rediss:` → TLS). */
export interface DirectTarget {
  kind: "direct";
  url: string;
  tls: boolean;
  db: number;
}

export type RedisTarget = DirectTarget | SentinelTarget;

export type ParsedRedisUrl = { ok: true; target: RedisTarget } | { ok: false; problem: string };

const FORMS =
  "must be a URL like redis://[user:password@]host:6379/0, rediss://… (TLS) or redis+sentinel://[user:password@]host:26379,host:26379/mastername[/db]";

export function parseRedisUrl(value: string): ParsedRedisUrl {
  const trimmed = value.trim();
  if (/^rediss\+sentinel:/i.test(trimmed)) {
    return {
      ok: false,
      problem: "TLS to a Sentinel group is not supported: use redis+sentinel:// on a trusted network",
    };
  }
  if (trimmed.toLowerCase().startsWith(`${SENTINEL_PROTOCOL}//`)) return parseSentinelUrl(trimmed);
  let url: URL;
  try {
    url = new URL(trimmed);
  } catch {
    return { ok: false, problem: FORMS };
  }
  if ((url.protocol !== "redis:" && url.protocol !== "rediss:") || url.hostname === "") {
    return { ok: false, problem: FORMS };
  }
  const db = url.pathname.replace(/^\//, "");
  if (db !== "" && !DB.test(db)) return { ok: false, problem: "database in the path must be a number from 0 to 15" };
  // The client decodes them (a bare `%` would throw there, in every process, at connect time).
  if (decode(url.username) === null || decode(url.password) === null)
    return { ok: false, problem: "user or password is not valid percent-encoding (write % as %25)" };
  return { ok: true, target: { kind: "direct", url: trimmed, tls: url.protocol === "rediss:", db: Number(db || 0) } };
}

function parseSentinelUrl(value: string): ParsedRedisUrl {
  const match = /^redis\+sentinel:\/\/(?:([^@/?#]*)@)?([^/?#]+)\/([^/?#]*)(?:\/([^/?#]*))?\/?(?:\?([^#]*))?$/i.exec(
    value,
  );
  if (!match) {
    return {
      ok: false,
      problem: "a Sentinel URL must be redis+sentinel://[user:password@]host:port[,host:port…]/mastername[/db]",
    };
  }
  const [, userinfo, hostList, name, db, query] = match;
  if (!MASTER_NAME.test(name ?? "")) {
    return { ok: false, problem: "the Sentinel master name (after the hosts) must be 1-128 letters, digits or . _ -" };
  }
  if (db !== undefined && db !== "" && !DB.test(db)) {
    return { ok: false, problem: "database after the master name must be a number from 0 to 15" };
  }
  const sentinels: SentinelTarget["sentinels"] = [];
  for (const entry of hostList!.split(",")) {
    const address = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(\d{1,5}))?$/.exec(entry.trim());
    const port = Number(address?.[2] ?? DEFAULT_SENTINEL_PORT);
    if (!address || port < 1 || port > 65535) {
      return { ok: false, problem: `sentinel address ${JSON.stringify(entry)} must be host:port (port 1-65535)` };
    }
    sentinels.push({ host: address[1]!.replace(/^\[|\]$/g, ""), port });
  }
  const target: SentinelTarget = { kind: "sentinel", sentinels, name: name!, db: Number(db || 0) };
  if (userinfo !== undefined) {
    const colon = userinfo.indexOf(":");
    const username = decode(colon < 0 ? userinfo : userinfo.slice(0, colon));
    const password = colon < 0 ? "" : decode(userinfo.slice(colon + 1));
    if (username === null || password === null)
      return { ok: false, problem: "user or password is not valid percent-encoding (write % as %25)" };
    // As in redis:// URLs: `user@` alone is a user without password, `:pw@` the default user.
    if (username) target.username = username;
    if (password) target.password = password;
  }
  for (const [key, raw] of new URLSearchParams(query ?? "")) {
    if (key === "sentinelUsername") target.sentinelUsername = raw;
    else if (key === "sentinelPassword") target.sentinelPassword = raw;
    else
      return {
        ok: false,
        problem: `unknown parameter ${JSON.stringify(key)} (known: sentinelUsername, sentinelPassword)`,
      };
  }
  return { ok: true, target };
}

function decode(text: string): string | null {
  try {
    return decodeURIComponent(text);
  } catch {
    return null;
  }
}

/** Parses a URL that the config check already accepted; throws on one it would have refused. */
export function redisTargetOf(url: string): RedisTarget {
  const parsed = parseRedisUrl(url);
  if (!parsed.ok) throw new Error(`not a Redis URL claimwatch accepts (${parsed.problem})`);
  return parsed.target;
}

/** Least time between two reconnects of one client on NOREPLICAS answers. */
export const NOREPLICAS_RECONNECT_MS = 2_000;

/** Last NOREPLICAS reconnect per client, keyed by its options object (ioredis calls the hook on it; a `duplicate()` gets its own). */
const lastNoReplicasReconnect = new WeakMap<object, number>();

function reconnectOnSentinelError(this: unknown, error: Error): boolean | 1 | 2 {
  if (error.message.startsWith("READONLY")) return 2;
  if (!error.message.startsWith("NOREPLICAS")) return false;
  const client = typeof this === "object" && this !== null ? this : reconnectOnSentinelError;
  const now = performance.now();
  if (now - (lastNoReplicasReconnect.get(client) ?? -Infinity) < NOREPLICAS_RECONNECT_MS) return false;
  lastNoReplicasReconnect.set(client, now);
  return 1;
}

/**
 * The connection part of the ioredis options for `url` (callers add timeouts and retries).
 * A direct URL is left to ioredis's own parser (it keeps user, password, db and TLS); the
 * returned object then carries only what our parser adds.
 */
export function connectionOptionsOf(target: RedisTarget): { url?: string; options: RedisOptions } {
  if (target.kind === "direct") return { url: target.url, options: {} };
  return {
    options: {
      sentinels: target.sentinels,
      name: target.name,
      db: target.db,
      username: target.username,
      password: target.password,
      sentinelUsername: target.sentinelUsername,
      sentinelPassword: target.sentinelPassword,
      // No `failoverDetector`: in ioredis 6 a detector left subscribed after the primary died
      // calls `disconnect()` on the connector while the client is reconnecting, and the
      // client ends for good ("Connection is closed."; seen in test/integration/redis-failover).
      // A lost connection re-asks the sentinels anyway, and a demoted primary answers READONLY:
      // reconnect (through the sentinels, to the new primary) and resend the command, which the
      // read-only server did not run. A primary that lost its replicas answers NOREPLICAS (with
      // `min-replicas-to-write`, RELIABILITY.md): after a failover that is the old primary, not
      // yet demoted — Sentinel leaves a reachable one taking writes for up to ~18 s, and its
      // demotion throws them away — so reconnect through the sentinels too, but fail the command
      // (it did not run; callers retry): while the sentinels still name this server (its replica
      // resyncing), a resend would only loop.
      // At most one NOREPLICAS reconnect per NOREPLICAS_RECONNECT_MS: a write outage lasts
      // seconds, and BullMQ writes every 100 ms.
      reconnectOnError: reconnectOnSentinelError,
    },
  };
}

/** The same server (or Sentinel group) with another logical database. */
export function withDatabase(url: string, db: number): string {
  const target = redisTargetOf(url);
  if (target.kind === "direct") {
    const parsed = new URL(target.url);
    parsed.pathname = `/${db}`;
    return parsed.toString();
  }
  const match = /^(redis\+sentinel:\/\/[^/?#]+\/[^/?#]+)(?:\/[^/?#]*)?\/?(\?[^#]*)?$/i.exec(url.trim());
  return `${match![1]}/${db}${match![2] ?? ""}`;
}

/** The URL as it may be shown or logged: passwords replaced by `***`. */
export function redactRedisUrl(url: string): string {
  return url
    .replace(/\/\/([^@/]*)@/, (_, userinfo: string) => {
      const colon = userinfo.indexOf(":");
      return colon < 0 ? `//${userinfo}@` : `//${userinfo.slice(0, colon)}:***@`;
    })
    .replace(/([?&]sentinelPassword=)[^&#]*/i, "$1***");
}

/** Where a URL points, for a log line: `host:port`, or `sentinel group <name> via h:p,h:p`. */
export function describeRedisTarget(url: string): string {
  const target = redisTargetOf(url);
  if (target.kind === "direct") return new URL(target.url).host;
  const via = target.sentinels.map(({ host, port }) => `${host.includes(":") ? `[${host}]` : host}:${port}`);
  return `sentinel group ${target.name} via ${via.join(",")}`;
}
