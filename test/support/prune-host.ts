/**
 * A child for test/integration/prune-clock.test.ts, run with a skewed wall clock: prunes the
 * abandoned work dirs and temporaries of the definitions in `<config>`, as a worker's
 * maintenance does. Prints `NOW <Date.now()>` (the clock it runs with), then `PRUNED`.
 *
 *   node --import tsx test/support/prune-host.ts <config>
 */
import { loadDefinitions } from "../../lib/rebuilds/definitions";
import { pruneAbandonedWorkDirs } from "../../lib/rebuilds/output";

const [config] = process.argv.slice(2);
if (!config) throw new Error("usage: prune-host.ts <config>");
const loaded = loadDefinitions(config);
if (!loaded.ok) throw loaded.error;
process.stdout.write(`NOW ${Date.now()}\n`);
await pruneAbandonedWorkDirs(loaded.definitions);
process.stdout.write("PRUNED\n");
