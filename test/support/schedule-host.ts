/**
 * A child for test/integration/skewed-clocks.test.ts, run with a skewed wall clock: opens the
 * clients as the web server and the CLI do (`openContext`), waits for its clock, and pauses or
 * resumes a schedule as an operator's request does. Prints one JSON line: the outcome (or the
 * error), the schedule's next tick as BullMQ holds it, the dashboard's next run, and the host's
 * clock.
 *
 *   REDIS_URL=… CLAIMWATCH_CONFIG=… node --import tsx test/support/schedule-host.ts <pause|resume> <rebuild>
 */
import { nextRunAt } from "../../lib/api/rebuilds";
import { getConfig } from "../../lib/config";
import { changeSchedule } from "../../lib/operations/schedule";
import { loadDefinitions } from "../../lib/rebuilds/definitions";
import { schedulerIdOf } from "../../lib/rebuilds/queue";
import { hostNow } from "../../lib/redis/clock";
import { openContext } from "../../lib/web/context";

const [action, rebuild] = process.argv.slice(2);
if ((action !== "pause" && action !== "resume") || !rebuild)
  throw new Error("usage: schedule-host.ts <pause|resume> <rebuild>");
const config = getConfig();
const loaded = loadDefinitions(config.definitionsPath);
if (!loaded.ok) throw loaded.error;
const context = openContext(config, loaded.definitions, "schedule-host");
try {
  await context.clockReady();
  const deps = {
    queue: context.queue,
    main: context.connections.main,
    keys: context.connections.keys,
    definitions: loaded.definitions,
  };
  let outcome: unknown;
  try {
    outcome = await changeSchedule(deps, action, { rebuild, actor: "test", reason: `${action} from a skewed host` });
  } catch (error) {
    outcome = { error: error instanceof Error ? error.message : String(error) };
  }
  const scheduler = await context.queue.getJobScheduler(schedulerIdOf(rebuild, undefined));
  const definition = loaded.definitions.rebuilds.get(rebuild)!;
  process.stdout.write(
    `${JSON.stringify({ outcome, next: scheduler?.next ?? null, nextRunAt: definition.schedule ? nextRunAt(definition.schedule) : null, hostNow: hostNow() })}\n`,
  );
} finally {
  await context.close();
}
