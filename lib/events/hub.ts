/**
 * One reader of the event streams per web server process, fanned out to every connected
 * browser: N open dashboards cost one blocking `XREAD` per stream, not N polls.
 *
 * - Position: the last entry id read from each stream (`main/claims`, e.g. `1733-0/1734-2`);
 *   it is the SSE event id, so a browser that reconnects sends it back as `Last-Event-ID`
 *   and gets what it missed (`backlog`) — or `gap: true` when that part was trimmed away.
 * - Derived events, sent to this process's clients only: a claim whose TTL ran out without a
 *   release (`claim.expired`, checked only for claims past their expected end, one pipelined
 *   `GET` per check), and a changed health report (one probe every 2 s while anyone listens; the
 *   newest report also goes out with every SSE heartbeat, so a page that missed a change, or
 *   holds an older fetch, is set right within one heartbeat).
 */
import type { Redis } from "ioredis";
import type { HealthReport } from "../health/health";
import { closeRedis, createRedis } from "../redis/client";
import type { RedisKeys } from "../redis/keys";
import { REVOKED_PREFIX } from "../redis/scripts";
import { decodeEntry } from "./publish";
import type { DeliveredEvent, StreamName } from "./types";

export type StreamPosition = Record<StreamName, string>;

export interface HubMessage {
  /** The composite position after this event (SSE id); null for derived events. */
  id: string | null;
  event: DeliveredEvent;
}

export type HubListener = (message: HubMessage) => void;

export interface HubSources {
  urls: Record<StreamName, string>;
  keys: RedisKeys;
  /** Non-blocking clients (bounded commands) for backlog reads and expiry checks. */
  clients: Record<StreamName, Pick<Redis, "xrange" | "xrevrange" | "pipeline">>;
  health: () => Promise<HealthReport>;
}

const STREAMS: readonly StreamName[] = ["main", "claims"];
const ID = /^\d{1,20}-\d{1,20}$/;
export const HEALTH_EVERY_MS = 2_000;
const EXPIRY_CHECK_EVERY_MS = 1_000;
/** A claim is checked this long after its expected end (its last refresh + TTL). */
const EXPIRY_GRACE_MS = 750;
const BACKLOG_LIMIT = 2_000;
const TRACKED_CLAIMS_MAX = 50_000;

export function formatPosition(position: StreamPosition): string {
  return `${position.main}/${position.claims}`;
}

/** Parses a `Last-Event-ID`; null when it is not one this server wrote. */
export function parsePosition(text: string | null | undefined): StreamPosition | null {
  if (!text) return null;
  const [main, claims, ...rest] = text.split("/");
  if (rest.length || !main || !claims || !ID.test(main) || !ID.test(claims)) return null;
  return { main, claims };
}

/** Orders two stream ids (`ms-seq`). */
export function compareIds(a: string, b: string): number {
  const [am, as] = a.split("-").map(BigInt) as [bigint, bigint];
  const [bm, bs] = b.split("-").map(BigInt) as [bigint, bigint];
  return am < bm ? -1 : am > bm ? 1 : as < bs ? -1 : as > bs ? 1 : 0;
}

const atOf = (id: string) => Number(id.split("-")[0]);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms).unref?.());

export class EventHub {
  private readonly listeners = new Set<HubListener>();
  private readonly position: StreamPosition = { main: "0-0", claims: "0-0" };
  private readonly readers = new Map<StreamName, Redis>();
  private readonly streamUp: Record<StreamName, boolean> = { main: false, claims: false };
  private started: Promise<void> | null = null;
  private stopped = false;
  private healthTimer: ReturnType<typeof setInterval> | undefined;
  private expiryTimer: ReturnType<typeof setInterval> | undefined;
  private lastHealth: { key: string; report: HealthReport } | null = null;
  /** Claims seen in events: name → token and when (local clock) it ends without a refresh. */
  /** `endsAt`: a local deadline (`performance.now()`). */
  private readonly tracked = new Map<string, { token: string; endsAt: number }>();

  constructor(private readonly sources: HubSources) {}

  /** Starts the readers (once); resolves when both streams' positions are known. */
  start(): Promise<void> {
    this.started ??= (async () => {
      await Promise.all(STREAMS.map((stream) => this.initPosition(stream)));
      for (const stream of STREAMS) void this.readLoop(stream);
    })().catch((error: unknown) => {
      this.started = null; // Redis unreachable: the next connection tries again
      throw error;
    });
    return this.started;
  }

  /** Whether both stream readers are reading (false while a Redis is unreachable). */
  get live(): boolean {
    return this.streamUp.main && this.streamUp.claims;
  }

  get latestHealth(): HealthReport | null {
    return this.lastHealth?.report ?? null;
  }

  /** Registers a listener; the position returned is where its live events begin. */
  subscribe(listener: HubListener): { position: StreamPosition; unsubscribe: () => void } {
    this.listeners.add(listener);
    if (this.listeners.size === 1) this.startTimers();
    return {
      position: { ...this.position },
      unsubscribe: () => {
        this.listeners.delete(listener);
        if (this.listeners.size === 0) this.stopTimers();
      },
    };
  }

  get listenerCount(): number {
    return this.listeners.size;
  }

  /**
   * Stored events after `from` up to `to` (inclusive), oldest first, each with the composite
   * position it leads to. `gap`: some of that range was trimmed (or is too long to replay):
   * the client must re-read its data instead.
   */
  async backlog(from: StreamPosition, to: StreamPosition): Promise<{ messages: HubMessage[]; gap: boolean }> {
    const entries: { stream: StreamName; id: string; fields: string[] }[] = [];
    let gap = false;
    for (const stream of STREAMS) {
      if (compareIds(from[stream], to[stream]) >= 0) continue;
      const client = this.sources.clients[stream];
      const key = this.sources.keys.events;
      const [first] = await client.xrange(key, "-", "+", "COUNT", 1);
      if (!first || compareIds(first[0], from[stream]) > 0) gap = true;
      const range = await client.xrange(key, `(${from[stream]}`, to[stream], "COUNT", BACKLOG_LIMIT);
      if (range.length >= BACKLOG_LIMIT) gap = true;
      for (const [id, fields] of range) entries.push({ stream, id, fields });
    }
    if (gap) return { messages: [], gap };
    entries.sort((a, b) => atOf(a.id) - atOf(b.id));
    const position = { ...from };
    const messages: HubMessage[] = [];
    for (const { stream, id, fields } of entries) {
      position[stream] = id;
      const event = decodeEntry(fields);
      if (event) messages.push({ id: formatPosition(position), event: { ...event, at: atOf(id) } });
    }
    return { messages, gap: false };
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.stopTimers();
    await Promise.all([...this.readers.values()].map((r) => closeRedis(r)));
  }

  private async initPosition(stream: StreamName): Promise<void> {
    const [last] = await this.sources.clients[stream].xrevrange(this.sources.keys.events, "+", "-", "COUNT", 1);
    this.position[stream] = last?.[0] ?? "0-0";
  }

  private async readLoop(stream: StreamName): Promise<void> {
    // Blocking reads need their own connection, without a command timeout.
    const reader = createRedis(this.sources.urls[stream], "worker", `claimwatch-web:events-${stream}`);
    this.readers.set(stream, reader);
    while (!this.stopped) {
      try {
        this.streamUp[stream] = reader.status === "ready";
        const reply = await reader.xread(
          "COUNT",
          500,
          "BLOCK",
          5_000,
          "STREAMS",
          this.sources.keys.events,
          this.position[stream],
        );
        this.streamUp[stream] = true;
        for (const [, entries] of reply ?? []) {
          for (const [id, fields] of entries) {
            this.position[stream] = id;
            const event = decodeEntry(fields);
            if (event) this.dispatch({ id: formatPosition(this.position), event: { ...event, at: atOf(id) } });
          }
        }
      } catch {
        this.streamUp[stream] = false;
        if (!this.stopped) await sleep(1_000);
      }
    }
  }

  private dispatch(message: HubMessage): void {
    this.track(message.event);
    for (const listener of this.listeners) {
      try {
        listener(message);
      } catch {
        // one broken connection must not starve the others
      }
    }
  }

  private track(event: DeliveredEvent): void {
    switch (event.type) {
      case "claim.acquired":
        if (this.tracked.size < TRACKED_CLAIMS_MAX) {
          this.tracked.set(event.name, { token: event.token, endsAt: performance.now() + event.ttlMs });
        }
        break;
      case "claim.refreshed": {
        const claim = this.tracked.get(event.name);
        if (claim?.token === event.token) claim.endsAt = performance.now() + event.ttlMs;
        break;
      }
      case "claim.revoked": {
        // Taken until its holder acknowledges (`claim.released`) or the window ends (expired).
        const claim = this.tracked.get(event.name);
        if (claim?.token === event.token) claim.endsAt = performance.now() + event.windowMs;
        break;
      }
      case "claim.lost":
        // A force-released holder noticed; the name stays taken until its release acknowledges.
        if (event.cause === "force-released") break;
        if (this.tracked.get(event.name)?.token === event.token) this.tracked.delete(event.name);
        break;
      case "claim.released":
      case "claim.expired":
        if (this.tracked.get(event.name)?.token === event.token) this.tracked.delete(event.name);
        break;
    }
  }

  private startTimers(): void {
    this.healthTimer = setInterval(() => void this.checkHealth(), HEALTH_EVERY_MS);
    this.expiryTimer = setInterval(() => void this.checkExpiries(), EXPIRY_CHECK_EVERY_MS);
    void this.checkHealth();
  }

  private stopTimers(): void {
    clearInterval(this.healthTimer);
    clearInterval(this.expiryTimer);
    this.healthTimer = this.expiryTimer = undefined;
  }

  private checkingHealth = false;
  private async checkHealth(): Promise<void> {
    if (this.checkingHealth) return;
    this.checkingHealth = true;
    try {
      const report = await this.sources.health();
      const key = JSON.stringify([report.ok, report.workers, report.problems, this.live]);
      const changed = key !== this.lastHealth?.key;
      // Always the newest report (each SSE heartbeat carries it); an event only on a change.
      this.lastHealth = { key, report };
      if (changed) this.dispatch({ id: null, event: { type: "health", report, at: Date.now() } });
    } catch {
      // currentHealth never throws; a failure here only delays the next report
    } finally {
      this.checkingHealth = false;
    }
  }

  private checkingExpiries = false;
  private async checkExpiries(): Promise<void> {
    if (this.checkingExpiries) return;
    const now = performance.now();
    const due = [...this.tracked].filter(([, c]) => c.endsAt + EXPIRY_GRACE_MS < now).slice(0, 1_000);
    if (due.length === 0) return;
    this.checkingExpiries = true;
    try {
      const pipeline = this.sources.clients.claims.pipeline();
      for (const [name] of due) pipeline.get(this.sources.keys.claim(name));
      const replies = (await pipeline.exec()) ?? [];
      due.forEach(([name, claim], i) => {
        const [error, holder] = replies[i] ?? [new Error("no reply"), null];
        if (error) return;
        if (holder === claim.token || holder === `${REVOKED_PREFIX}${claim.token}`) {
          claim.endsAt = performance.now() + 1_000; // refreshed, its event not seen yet: look again soon
          return;
        }
        this.tracked.delete(name);
        // Gone without a release event: it expired. (A new token means a takeover, which
        // arrives as its own `claim.acquired`.)
        if (holder === null) {
          this.dispatch({ id: null, event: { type: "claim.expired", name, token: claim.token, at: Date.now() } });
        }
      });
    } catch {
      // claims Redis unreachable: the health report says so; check again next tick
    } finally {
      this.checkingExpiries = false;
    }
  }
}
