/**
 * `claimwatch trigger` prints the "Rebuild now" preview first; with no worker live it says the job
 * will wait in the queue, whatever the outcome (black-box helper-147: it printed "would build" and
 * "Queued" with every worker paused).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { describePreview } from "../../cli/commands/trigger";

test("the preview line, and the no-worker line when none is live", () => {
  assert.equal(describePreview({ outcome: "runs", version: "v1", workersLive: 2 }), "Preview: would build version v1");
  assert.equal(
    describePreview({ outcome: "runs", version: "v1", workersLive: 0 }),
    "Preview: would build version v1\nNo worker is live now: the job waits in the queue until one starts (claimwatch status).",
  );
  const skip = describePreview({
    outcome: "skip",
    reason: "already-rebuilt",
    version: "v1",
    runId: "r",
    rebuiltAt: null,
    message: "would be skipped: already rebuilt",
    workersLive: 0,
  });
  assert.match(skip, /^Preview: would be skipped: already rebuilt \(version v1\)\nNo worker is live now/);
  // Not known (Redis did not say): nothing claimed either way.
  assert.equal(
    describePreview({ outcome: "runs", version: "v1", workersLive: null }),
    "Preview: would build version v1",
  );
});
