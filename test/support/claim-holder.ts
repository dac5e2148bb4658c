/**
 * A child process that holds a claim, for tests that pause it with SIGSTOP. Talks over lines:
 *   stdout  "acquired <token> <fence>"     the claim is held; work is running
 *           "lost <cause> aborted=<bool>"  throwIfLost() found the claim lost (before publishing)
 *           "publish <status>"             result of a fenced publish with this holder's fence
 *           "result <status>" | "error <name> <cause>"   withClaim's outcome
 *   stdin   "publish"                      check the claim, then publish "from-holder" anyway
 * Configured by env: REDIS_URL, KEY_PREFIX, CLAIM_NAME, TTL_MS, REFRESH_EVERY_MS, JOB_ID.
 */
import readline from "node:readline";
import { ClaimLostError, publishFenced, withClaim } from "../../lib/claims/index";
import { createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";

const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`claim-holder: ${name} is not set`);
  return value;
};
const say = (...parts: Array<string | number | boolean>) => process.stdout.write(`${parts.join(" ")}\n`);

const client = createRedis(env("REDIS_URL"), "worker");
const keys = redisKeys(env("KEY_PREFIX"));
const name = env("CLAIM_NAME");
const lines = readline.createInterface({ input: process.stdin });

try {
  const result = await withClaim(
    client,
    keys,
    name,
    { jobId: env("JOB_ID"), workerId: `holder-${process.pid}` },
    async (claim) => {
      say("acquired", claim.token, claim.fence);
      for await (const line of lines) {
        if (line.trim() !== "publish") continue;
        let lost: ClaimLostError | undefined;
        try {
          claim.throwIfLost();
        } catch (error) {
          lost = error as ClaimLostError;
          say("lost", lost.cause, `aborted=${claim.signal.aborted}`);
        }
        // Published even after a loss, to show that the fence refuses a stale holder.
        const published = await publishFenced(client, keys, {
          name,
          fence: claim.fence,
          token: claim.token,
          value: "from-holder",
        });
        say("publish", published.status);
        if (lost) throw lost;
        return published.status;
      }
      return "stdin-closed";
    },
    { ttlMs: Number(env("TTL_MS")), refreshEveryMs: Number(env("REFRESH_EVERY_MS")), releaseTimeoutMs: 1_000 },
  );
  say("result", result.status);
} catch (error) {
  say("error", (error as Error).name, error instanceof ClaimLostError ? error.cause : String(error));
} finally {
  lines.close();
  client.disconnect();
}
