/**
 * Watches what is published, from outside the workers: every 50 ms, each claim's fenced pointer
 * in Redis and each output's `current` symlink. Changes become events (`pointer`, `current`):
 * the checker's view of the publish history, next to the run records the workers wrote.
 * Polling can miss a pointer that moved twice within one interval; the checker treats the
 * observations as a lower bound and never as the only evidence of a publish.
 */
import fs from "node:fs";
import path from "node:path";
import type { Redis } from "ioredis";
import { claimName, readPublished } from "../../lib/claims";
import { outputDirOf, type Definitions } from "../../lib/rebuilds/definitions";
import type { RedisKeys } from "../../lib/redis/keys";
import { claimLabel, claimRefs, sleep, withTimeout, type EventLog } from "./bed";

export class PublishWatcher {
  private stopped = false;
  private loop: Promise<void> | null = null;
  private readonly pointers = new Map<string, string>();
  private readonly currents = new Map<string, string>();

  constructor(
    private readonly claims: Redis,
    private readonly keys: RedisKeys,
    private readonly definitions: Definitions,
    private readonly events: EventLog,
  ) {}

  start(): void {
    this.loop = (async () => {
      while (!this.stopped) {
        await this.sample();
        await sleep(50);
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
    await this.sample();
  }

  async sample(): Promise<void> {
    await Promise.all(
      claimRefs().map(async (ref) => {
        const definition = this.definitions.rebuilds.get(ref.rebuild)!;
        const name = claimName(definition.claimPath, ref.tenant);
        const published = await withTimeout(readPublished(this.claims, this.keys, name), 1_000, "published").catch(
          () => undefined,
        );
        if (published === undefined) return; // Redis unreachable: no observation
        const label = claimLabel(ref);
        const seen = published ? `${published.fence} ${published.value} ${published.runId ?? ""}` : "";
        if (seen !== (this.pointers.get(label) ?? "")) {
          this.pointers.set(label, seen);
          this.events.record("pointer", {
            claim: label,
            fence: published?.fence ?? null,
            value: published?.value ?? null,
            runId: published?.runId ?? null,
          });
        }
      }),
    );
    for (const ref of claimRefs()) {
      const definition = this.definitions.rebuilds.get(ref.rebuild)!;
      let target = "";
      try {
        target = fs.readlinkSync(path.join(outputDirOf(definition, ref.tenant), "current"));
      } catch {
        // no current yet
      }
      const label = claimLabel(ref);
      if (target !== (this.currents.get(label) ?? "")) {
        this.currents.set(label, target);
        this.events.record("current", { rebuild: definition.name, claim: label, target });
      }
    }
  }
}
