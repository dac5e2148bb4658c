/**
 * Schedules (Celery beat's job): every process upserts one BullMQ job scheduler per scheduled
 * rebuild and tenant at start, and removes claimwatch schedulers no longer in the definitions.
 * Upserts of one id are idempotent, so N processes give one job per tick, and no single "beat"
 * process is needed.
 */
import type { Queue } from "bullmq";
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { tenantsOf, type Definitions } from "./definitions";
import { jobOptionsFor, schedulerIdOf, type RebuildJobData } from "./queue";

export async function syncSchedules(
  queue: Pick<Queue, "upsertJobScheduler" | "getJobSchedulers" | "removeJobScheduler">,
  definitions: Definitions,
  client: Pick<Redis, "set" | "del">,
  keys: RedisKeys,
): Promise<{ upserted: string[]; removed: string[] }> {
  const wanted = new Set<string>();
  const upserted: string[] = [];
  for (const definition of definitions.rebuilds.values()) {
    if (!definition.schedule) continue;
    for (const tenant of tenantsOf(definition)) {
      const id = schedulerIdOf(definition.name, tenant);
      wanted.add(id);
      const data: RebuildJobData = {
        rebuild: definition.name,
        ...(tenant ? { tenant } : {}),
        force: false,
        trigger: "schedule",
      };
      const { attempts, backoff, removeOnComplete, removeOnFail } = jobOptionsFor(definition, definitions.retention);
      await queue.upsertJobScheduler(
        id,
        { pattern: definition.schedule.cron, tz: definition.schedule.tz },
        { name: definition.name, data, opts: { attempts, backoff, removeOnComplete, removeOnFail } },
      );
      await client.set(keys.schedulerSince(id), String(Date.now()), "NX");
      upserted.push(id);
    }
  }
  const removed: string[] = [];
  for (const scheduler of await queue.getJobSchedulers(0, -1)) {
    const id = scheduler.key ?? scheduler.id;
    if (id?.startsWith("sched.") && !wanted.has(id)) {
      await queue.removeJobScheduler(id);
      await client.del(keys.schedulerSince(id));
      removed.push(id);
    }
  }
  return { upserted, removed };
}
