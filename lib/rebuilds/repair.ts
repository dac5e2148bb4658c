/**
 * `current` follows the fenced pointer in Redis. A stale holder that renamed its symlink late
 * (after a newer fence published) is undone here: every worker compares each output's `current`
 * with the published build on each heartbeat and repairs a difference.
 */
import fs from "node:fs";
import { claimName, readListedPublish, readPublished } from "../claims";
import type { RedisKeys } from "../redis/keys";
import { PUBLISHED_RESTORE, runScript, type ScriptingClient } from "../redis/scripts";
import type { Redis } from "ioredis";
import { serverNow } from "../redis/time";
import { outputDirOf, tenantsOf, type Definitions, type RebuildDefinition } from "./definitions";
import { buildDirOf, readCurrent, BUILD_HASH } from "./output";
import { listPublishedRun, pointCurrentAtRecord, readPublishedFence, recordPublishedFence } from "./published-fence";
import { recordCurrentLag, type CurrentLagOutcome } from "./current-lag";
import { REPAIR_LOCK_WAIT_MS } from "./current-lock";

/** How old a published pointer must be before `current` is made to follow it. */
export const REPAIR_AFTER_MS = 10_000;

/**
 * A repair that made `current` a run's build (the pointer names the run): told to the caller, who
 * notes it on a run record that ended without saying so (lib/runs/writer.ts `noteMadeCurrent`).
 * Returns a line for the log, or null.
 */
export type OnMadeCurrent = (made: {
  runId: string;
  fence: number;
  buildHash: string;
  definition: RebuildDefinition;
  /** The output's claim name: the lane its version is marked in. */
  claim: string;
}) => Promise<string | null>;

export async function repairCurrentLinks(
  client: ScriptingClient & Pick<Redis, "hgetall" | "time" | "hset" | "hdel" | "lrange">,
  keys: RedisKeys,
  definitions: Definitions,
  onMadeCurrent?: OnMadeCurrent,
): Promise<string[]> {
  const repaired: string[] = [];
  // Each output's `current`: following its published build, or lagging because repair fails
  // (recorded for the health report: current-lag.ts).
  const outcomes: CurrentLagOutcome[] = [];
  // publishedAt is on the claims server's clock: judge its age by that clock, not this host's.
  const now = await serverNow(client);
  const checks: Promise<void>[] = [];
  for (const definition of definitions.rebuilds.values()) {
    for (const tenant of tenantsOf(definition)) {
      const outputDir = outputDirOf(definition, tenant);
      // The published build, once read; `current` found elsewhere (checked) or not read yet.
      let lagging: { fence: number; build: string; checked: boolean } | undefined;
      const lags = (reason: string) => {
        if (lagging) outcomes.push({ outputDir, lag: { reason, ...lagging } });
      };
      checks.push(
        (async () => {
          const name = claimName(definition.claimPath, tenant);
          let published = await readPublished(client, keys, name);
          // A disk that fails before `current` is read still shows: "cannot be checked" (review helper-119).
          if (published && BUILD_HASH.test(published.value))
            lagging = { fence: published.fence, build: published.value, checked: false };
          // The claims Redis forgot a publish this output recorded durably: put the pointer back.
          const durable = await readPublishedFence(outputDir);
          // Or it holds the durable record's fence with another build: Redis lost writes and
          // granted that fence twice; the build recorded first is the output's.
          const redisBehind =
            durable !== null &&
            BUILD_HASH.test(durable.hash) &&
            (!published ||
              published.fence < durable.fence ||
              (published.fence === durable.fence && published.value !== durable.hash));
          if (durable && redisBehind) {
            const restored = await runScript(
              client,
              PUBLISHED_RESTORE,
              [keys.published(name), keys.claimFence(name)],
              [durable.fence, durable.hash],
            );
            if (restored === 1) {
              repaired.push(
                `restored the claims Redis pointer of ${outputDir} to fence ${durable.fence} (${durable.hash}): Redis had lost ${published ? `it (it said fence ${published.fence})` : "it"}`,
              );
            }
            published = await readPublished(client, keys, name);
            if (published && BUILD_HASH.test(published.value))
              lagging = { fence: published.fence, build: published.value, checked: false };
          }
          if (!published || !BUILD_HASH.test(published.value)) return;
          // The publisher swaps `current` right after its publish; only a difference that has
          // lasted longer than that is repaired (else a repair could race a newer publish).
          if (now - published.publishedAt < REPAIR_AFTER_MS) return;
          // This machine may not hold that build (outputs on local disks): nothing to repair here.
          // Any other answer than "not there" (EIO) is a disk that fails.
          const held = await fs.promises.stat(buildDirOf(outputDir, published.value)).then(
            () => true,
            (error: NodeJS.ErrnoException) => {
              if (error.code === "ENOENT" || error.code === "ENOTDIR") return false;
              throw error;
            },
          );
          if (!held) return;
          const current = await readCurrent(outputDir);
          if (current === published.value) return void outcomes.push({ outputDir, lag: null });
          lagging = { fence: published.fence, build: published.value, checked: true };
          // A pointer older than the fence this output is known to have published means the
          // claims Redis lost writes: `current` never moves back to it (published-fence.ts).
          if (durable && published.fence < durable.fence) {
            repaired.push(
              `NOT repairing ${outputDir}/current: the claims Redis says fence ${published.fence} (${published.value}), but fence ${durable.fence} (${durable.hash}) was published; Redis lost writes`,
            );
            return;
          }
          // Its publisher could not record the fence (a full or failing disk): recorded first,
          // so `current` never names a build whose fence a Redis crash could take back.
          if (!durable || durable.fence < published.fence) {
            const recorded = await recordPublishedFence(outputDir, published.fence, published.value).catch(
              (error: unknown) => String(error),
            );
            if (typeof recorded === "string" || recorded.status !== "recorded") {
              lags(
                `its fence record could not be written: ${typeof recorded === "string" ? recorded : recorded.status}`,
              );
              repaired.push(
                `NOT repairing ${outputDir}/current: the published fence ${published.fence} (${published.value}) could not be recorded beside it: ${typeof recorded === "string" ? recorded : recorded.status}`,
              );
              return;
            }
          }
          // Right before the swap, the record still names this pointer: a newer publish recorded
          // since is its publisher's to point `current` at (a swap now would put it back).
          const record = await readPublishedFence(outputDir);
          if (record?.fence === published.fence && record.hash === "") {
            lags("its fence record cannot be read");
            repaired.push(
              `NOT repairing ${outputDir}/current: the record of fence ${published.fence} cannot be read (a failing disk?)`,
            );
            return;
          }
          if (record?.fence !== published.fence || record.hash !== published.value) return;
          // A short wait for the swap lock: held by a swapper held up, repair comes back next beat.
          await pointCurrentAtRecord(outputDir, published.fence, published.value, {
            lockWaitMs: REPAIR_LOCK_WAIT_MS,
          });
          // What `current` names now: this pointer's build, or a newer fence's recorded meanwhile
          // (left as it was when that newer build is not on this host: its publisher moves it).
          const after = await readCurrent(outputDir);
          if (after === current && after !== published.value) {
            lags("a newer fence is recorded and its build is not on this host");
            repaired.push(
              `NOT repairing ${outputDir}/current: a newer fence is recorded; its build is not on this host`,
            );
            return;
          }
          outcomes.push({ outputDir, lag: null });
          repaired.push(
            `repaired ${outputDir}/current: ${current ?? "(none)"} -> ${after ?? "(none)"} (${after === published.value ? `fence ${published.fence}` : `a newer fence than ${published.fence}`})`,
          );
          // Only when `current` names that build now: the swap follows a newer fence recorded
          // meanwhile (its publisher's, whose own record says so).
          if (published.runId && onMadeCurrent && (await readCurrent(outputDir)) === published.value) {
            // Its run listed on disk first: the run record (and the version's idempotency key)
            // then says done, and its job ends on it (review helper-164: repair made the build of
            // a run whose listing had failed current and its job ended unlisted; a crash of both
            // Redises then brought the job back with nothing to find). Not listed: not told (its
            // job's next attempt lists it, or builds again).
            const runId = published.runId;
            const listed = await readListedPublish(client, keys, name, runId).catch(() => null);
            const unlisted =
              listed?.fence !== published.fence
                ? "its publish is not in the claims Redis's list"
                : await listPublishedRun(
                    outputDir,
                    { fence: published.fence, hash: published.value },
                    { runId, version: listed.version, mark: listed.mark },
                  ).then(
                    () => null,
                    (error: unknown) => String(error),
                  );
            if (unlisted !== null) {
              repaired.push(`the run record of ${runId} not told (its job's next attempt decides): ${unlisted}`);
              return;
            }
            const said = await onMadeCurrent({
              runId: published.runId,
              fence: published.fence,
              buildHash: published.value,
              definition,
              claim: name,
            }).catch((error: unknown) => `the run record of ${published.runId} not told: ${String(error)}`);
            if (said) repaired.push(said);
          }
        })().catch((error: unknown) => {
          // One output's failing disk (its record unreadable) holds up no other output.
          lags(String(error));
          repaired.push(`NOT repairing ${outputDir}: ${String(error)}`);
        }),
      );
    }
  }
  await Promise.all(checks);
  await recordCurrentLag(client, keys, outcomes, now).catch((error: unknown) =>
    repaired.push(`could not record which outputs' current lags behind their published build: ${String(error)}`),
  );
  return repaired;
}
