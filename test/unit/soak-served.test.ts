/**
 * The soak checker's rule for a request of a version the caller names (scripts/soak/served.ts):
 * with requests for older versions again (A → B → A), "A was published once" proves nothing.
 * Each case is an outcome the product can produce; the unserved ones are the defects the rule
 * exists to catch (the "already rebuilt" skip of helper-109, and of review helper-112).
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { requestServed, servedAt, type SeenPublish } from "../../scripts/soak/served";

const A1: SeenPublish = { version: "v0001", fence: 1, beganAt: 1_000, doneAt: 2_000 };
const B2: SeenPublish = { version: "v0002", fence: 2, beganAt: 3_000, doneAt: 4_000 };

describe("soak checker: a request served", () => {
  test("the output serves the highest fence seen done", () => {
    assert.equal(servedAt([A1, B2], 1_500), undefined);
    assert.equal(servedAt([A1, B2], 3_500)?.version, "v0001");
    assert.equal(servedAt([B2, A1], 9_000)?.version, "v0002");
    // An older version deferred behind a newer one publishes after it, with a higher fence.
    const A3: SeenPublish = { version: "v0001", fence: 3, beganAt: 4_500, doneAt: 5_000 };
    assert.equal(servedAt([A1, B2, A3], 6_000)?.version, "v0001");
  });

  test("A → B → A: the request for A skipped while the output served B is not served", () => {
    const result = requestServed({
      publishes: [A1, B2],
      version: "v0001",
      requestedAt: 5_000,
      ended: { from: 5_050, at: 5_100 },
    });
    assert.equal(result.served, false);
    assert.match(result.served ? "" : result.why, /served v0002 \(fence 2\)/);
  });

  test("A → B → A: A published again after the request is served", () => {
    const A3: SeenPublish = { version: "v0001", fence: 3, beganAt: 5_200, doneAt: 6_000 };
    assert.deepEqual(requestServed({ publishes: [A1, B2, A3], version: "v0001", requestedAt: 5_000 }), {
      served: true,
    });
  });

  test("a repeat skipped while the output serves its version is served", () => {
    assert.deepEqual(
      requestServed({ publishes: [A1, B2], version: "v0002", requestedAt: 5_000, ended: { from: 5_050, at: 5_100 } }),
      {
        served: true,
      },
    );
  });

  test("a skip while a build of another version was under way (and published) is not served", () => {
    // B's build began at 3 000; A (then current) was skipped at 3 500; B published at 4 000.
    const result = requestServed({
      publishes: [A1, B2],
      version: "v0001",
      requestedAt: 2_500,
      ended: { from: 3_400, at: 3_500 },
    });
    assert.equal(result.served, false);
    assert.match(result.served ? "" : result.why, /build of v0002 \(fence 2\) was under way/);
  });

  test("a skip before the other build began is served (it came first)", () => {
    assert.deepEqual(
      requestServed({ publishes: [A1, B2], version: "v0001", requestedAt: 2_500, ended: { from: 2_800, at: 2_900 } }),
      {
        served: true,
      },
    );
  });

  test("a skip decided before another build began, its record written after (under the claim): served", () => {
    // A's attempt checked at 2 900 (A served, nothing under way); B began at 3 000; the skip's
    // record was written at 3 500, after the claim's release (review helper-118).
    assert.deepEqual(
      requestServed({ publishes: [A1, B2], version: "v0001", requestedAt: 2_500, ended: { from: 2_900, at: 3_500 } }),
      { served: true },
    );
  });

  test("an older publish whose final write came late is not a publish after the request", () => {
    // A published at 2 000 (seen then); its final write landed at 9 000: done at the earliest sight.
    const lateA: SeenPublish = { version: "v0001", fence: 1, beganAt: 1_000, doneAt: 2_000 };
    const result = requestServed({
      publishes: [lateA, B2],
      version: "v0001",
      requestedAt: 5_000,
      ended: { from: 9_100, at: 9_200 },
    });
    assert.equal(result.served, false);
  });

  test("a job that never ended without publishing, and no publish after the request: not served", () => {
    const result = requestServed({ publishes: [A1, B2], version: "v0001", requestedAt: 5_000 });
    assert.equal(result.served, false);
  });

  test("the publish it rode on (a claim-held skip) counts when done after the request", () => {
    // The holder of v0002 published at 4 000; the request came at 3 900 and was skipped at 3 950.
    assert.deepEqual(
      requestServed({ publishes: [A1, B2], version: "v0002", requestedAt: 3_900, ended: { from: 3_920, at: 3_950 } }),
      {
        served: true,
      },
    );
  });
});
