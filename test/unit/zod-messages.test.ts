/**
 * zod's own messages in plain words, wherever a zod issue becomes a message (API bodies, the
 * environment, claimwatch.yaml): lib/zod-messages.ts. A schema's own message still wins.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { z } from "zod";
import { describeZodError } from "../../lib/api/errors";

const body = z
  .object({
    reason: z.string(),
    force: z.boolean().optional(),
    n: z.number().int().min(10).max(20).optional(),
    kind: z.enum(["a", "b"]).optional(),
    tags: z.array(z.string()).max(2).optional(),
    name: z.string().min(1).optional(),
    ratio: z.number().gt(0).optional(),
    own: z.string().min(3, "must name at least three letters").optional(),
  })
  .strict();
const said = (value: unknown) => describeZodError(body.safeParse(value).error!);

test("a missing field is required; a wrong type names what it must be and what it is", () => {
  assert.equal(said({}), "reason: is required");
  assert.equal(said([]), "body: must be an object, not a list");
  assert.equal(said({ reason: 1 }), "reason: must be a string, not a number");
  assert.equal(said({ reason: "x", force: "yes" }), "force: must be a boolean, not a string");
  assert.equal(said({ reason: null }), "reason: must be a string, not null");
});

test("bounds, whole numbers, choices and sizes in words", () => {
  assert.equal(said({ reason: "x", n: 5 }), "n: must be at least 10");
  assert.equal(said({ reason: "x", n: 25 }), "n: must be at most 20");
  assert.equal(said({ reason: "x", n: 10.5 }), "n: must be a whole number");
  assert.equal(said({ reason: "x", ratio: 0 }), "ratio: must be greater than 0");
  assert.equal(said({ reason: "x", kind: "c" }), 'kind: must be one of "a", "b"');
  assert.equal(said({ reason: "x", tags: ["a", "b", "c"] }), "tags: must have at most 2 items");
  assert.equal(said({ reason: "x", name: "" }), "name: must not be empty");
});

test("a schema's own message wins", () => {
  assert.equal(said({ reason: "x", own: "ab" }), "own: must name at least three letters");
});

test("an unknown field names the one it was surely meant as, from the schema (not one already given)", async () => {
  const { readJsonBody, readQuery } = await import("../../lib/api/input");
  const { triggerBody } = await import("../../lib/api/rebuilds");
  const refusal = (promise: Promise<unknown>) =>
    promise.then(
      () => "accepted",
      (error: Error) => error.message,
    );
  const post = (json: unknown) =>
    refusal(readJsonBody(new Request("http://x/", { method: "POST", body: JSON.stringify(json) }), triggerBody));
  assert.equal(await post({ verison: "v1" }), "unknown field 'verison' (did you mean 'version'?)");
  assert.equal(await post({ forse: true }), "unknown field 'forse' (did you mean 'force'?)");
  assert.equal(await post({ version: "v1", verison: "v2" }), "unknown field 'verison'");
  assert.equal(await post({ priority: 1 }), "unknown field 'priority'");
  const query = z.strictObject({ limit: z.string().optional(), cursor: z.string().optional() });
  assert.throws(() => readQuery("http://x/?limt=5", query), {
    message: "unknown field 'limt' (did you mean 'limit'?)",
  });
  // Without the schema: the field alone, as before.
  assert.equal(said({ reason: "x", nme: "y" }), "unknown field 'nme'");
});
