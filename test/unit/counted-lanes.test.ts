/**
 * The timeline's columnar bucket answer (lib/runs/counted-lanes.ts): what the API sends reads back
 * as the buckets it was made from (durations within half a ms per run, skips without one), with
 * bucket starts implied by index and empty buckets and lanes left out.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { TimelineBucket } from "../../lib/runs/buckets";
import { countedBuckets, toCountedLanes } from "../../lib/runs/counted-lanes";

const H3 = 3 * 3_600_000;
const since = 100 * H3 + 1_234;

const bucket = (
  rebuild: string,
  tenant: string | null,
  index: number,
  counts: TimelineBucket["counts"],
  durationMs: TimelineBucket["durationMs"],
): TimelineBucket => ({ rebuild, tenant, start: 100 * H3 + index * H3, counts, durationMs });

test("lanes read back as the buckets they were made from", () => {
  const buckets = [
    bucket("tiles", null, 0, { rebuilt: 2, failed: 1 }, { rebuilt: 3_001, failed: 500 }),
    bucket("tiles", null, 5, { rebuilt: 1 }, { rebuilt: 1_000 }),
    bucket("archive", null, 3, { skipped: 4, aborted: 1 }, { skipped: 12, aborted: 7_000 }),
    bucket("empty", null, 2, {}, {}),
  ];
  const counted = toCountedLanes(buckets, since, H3);
  assert.equal(counted.first, 100 * H3);
  assert.deepEqual(counted.lanes, [
    { rebuild: "archive", tenant: null, at: [3], runs: { skipped: [4], aborted: [1] }, meanMs: { aborted: [7_000] } },
    {
      rebuild: "tiles",
      tenant: null,
      at: [0, 5],
      runs: { rebuilt: [2, 1], failed: [1, 0] },
      meanMs: { rebuilt: [1_501, 1_000], failed: [500, 0] },
    },
  ]);
  const back = countedBuckets(JSON.parse(JSON.stringify(counted)) as typeof counted, H3);
  assert.deepEqual(back, [
    bucket("tiles", null, 0, { rebuilt: 2, failed: 1 }, { rebuilt: 3_002, failed: 500 }),
    bucket("archive", null, 3, { skipped: 4, aborted: 1 }, { skipped: 0, aborted: 7_000 }),
    bucket("tiles", null, 5, { rebuilt: 1 }, { rebuilt: 1_000 }),
  ]);
});

test("tenant lanes keep their tenant (null: the rebuild's runs without one)", () => {
  const counted = toCountedLanes(
    [
      bucket("tiles", "acme", 1, { rebuilt: 1 }, { rebuilt: 10 }),
      bucket("tiles", null, 1, { failed: 1 }, { failed: 20 }),
    ],
    since,
    H3,
  );
  assert.deepEqual(
    counted.lanes.map((lane) => [lane.rebuild, lane.tenant, lane.at]),
    [
      ["tiles", null, [1]],
      ["tiles", "acme", [1]],
    ],
  );
  assert.deepEqual(toCountedLanes([], since, H3), { first: 100 * H3, lanes: [] });
});
