/**
 * A real Redis Sentinel group for tests (scripts/faults/sentinel.ts): a primary, one replica and
 * three sentinels, each in a throw-away directory on a free loopback port, stopped by PID when
 * the test file ends (and SIGKILLed with the test process if it dies: `dieWithParent`).
 */
import {
  adminClient,
  pollUntil,
  startSentinelGroup as startGroup,
  type SentinelGroup as Group,
  type SentinelGroupOptions,
} from "../../scripts/faults/sentinel";
import { startTestRedis, type TestRedis } from "./redis";

export { adminClient, pollUntil, type SentinelGroupOptions };
export type SentinelGroup = Group<TestRedis>;

export function startSentinelGroup(options: SentinelGroupOptions = {}): Promise<SentinelGroup> {
  return startGroup(
    (extraArgs, { sentinelConfig }) => startTestRedis(extraArgs, sentinelConfig ? { sentinelConfig } : {}),
    options,
  );
}
