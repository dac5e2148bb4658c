/** The packed lane field of the timeline counters (`status=runs/summedMs,…`) as the reader parses it. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { forEachLaneCount } from "../../lib/runs/timeline-counters";

const parse = (packed: string) => {
  const out: [string, number, number][] = [];
  forEachLaneCount(packed, (status, runs, durationMs) => out.push([status, runs, durationMs]));
  return out;
};

test("well-formed parts in order; malformed ones skipped", () => {
  assert.deepEqual(parse("rebuilt=12/480000,failed=1/3000"), [
    ["rebuilt", 12, 480_000],
    ["failed", 1, 3_000],
  ]);
  assert.deepEqual(parse(""), []);
  assert.deepEqual(parse("skipped=2/0"), [["skipped", 2, 0]]);
  assert.deepEqual(
    parse("Rebuilt=1/2,=1/2,failed=/2,failed=1/,failed=1,failed=x/2,aborted=1/2.5,a-b=1/2,,cancelled=3/4"),
    [["cancelled", 3, 4]],
  );
});
