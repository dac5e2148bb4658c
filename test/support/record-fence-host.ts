/**
 * A child for test/integration/build-durable.test.ts, run under strace: records a publish's fence
 * beside an output (`recordPublishedFence`, as a rebuild's publish does), then reads back the runs
 * the output lists. Prints `RECORDED <status>` or `FAILED <message>`, then `LISTED <run ids>`,
 * and exits 0 either way. With RECORD_AFTER_GO=1 it first says READY, and records once a line
 * comes on stdin (a test that needs two writers at once starts them both first).
 *
 *   node --import tsx test/support/record-fence-host.ts <outputDir> <fence> <hash> <runId>
 */
import { readPublishedJobs, recordPublishedFence } from "../../lib/rebuilds/published-fence";

const [outputDir, fence, hash, runId] = process.argv.slice(2);
if (!outputDir || !fence || !hash || !runId)
  throw new Error("usage: record-fence-host.ts <outputDir> <fence> <hash> <runId>");
// RECORD_AFTER_GO=1: says READY once loaded, and records once a line comes on stdin.
if (process.env.RECORD_AFTER_GO === "1") {
  process.stdout.write("READY\n");
  await new Promise<void>((resolve) => process.stdin.once("data", () => resolve()));
  process.stdin.pause();
}
try {
  const recorded = await recordPublishedFence(outputDir, Number(fence), hash, { runId, version: "v1", mark: null });
  process.stdout.write(`RECORDED ${recorded.status}\n`);
} catch (error) {
  process.stdout.write(`FAILED ${(error as Error).message}\n`);
}
const listed = await readPublishedJobs(outputDir).catch(() => []);
process.stdout.write(`LISTED ${listed.map((run) => run.runId).join(",")}\n`);
