/** Request bodies (lib/api/input.ts): a hostile nesting is a 400 naming the limit, never a stack overflow. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ApiError } from "../../lib/api/errors";
import { MAX_BODY_DEPTH, nestingDepth, readJsonBody } from "../../lib/api/input";
import { scheduleBody } from "../../lib/api/operations";

const post = (body: string) => new Request("http://x/api", { method: "POST", body });

test("nestingDepth counts arrays and objects, stops past the limit", () => {
  assert.equal(nestingDepth("text"), 0);
  assert.equal(nestingDepth({ a: 1 }), 1);
  assert.equal(nestingDepth({ a: [{ b: [] }] }), 4);
  let deep: unknown = [];
  for (let i = 0; i < 100_000; i++) deep = [deep];
  assert.equal(nestingDepth(deep), MAX_BODY_DEPTH + 1);
});

test("a body nested thousands deep is refused with a 400 (it overflowed the stack inside zod)", async () => {
  const body = `{"action":"pause","reason":{"length":${"[".repeat(4_000)}${"]".repeat(4_000)}}}`;
  const error = await readJsonBody(post(body), scheduleBody).then(
    () => null,
    (e: unknown) => e,
  );
  assert.ok(error instanceof ApiError, String(error));
  assert.equal(error.status, 400);
  assert.match(error.message, /nested deeper than 16 levels/);
  // An ordinary body still parses.
  assert.deepEqual(await readJsonBody(post('{"action":"pause","reason":"disk full"}'), scheduleBody), {
    action: "pause",
    reason: "disk full",
  });
});

test("a body the client stops sending midway is a 400 naming it, not a server failure (black-box helper-147)", async () => {
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(new TextEncoder().encode('{"action":"pau'));
      controller.error(new Error("aborted"));
    },
  });
  const request = new Request("http://x/api", { method: "POST", body, duplex: "half" } as RequestInit);
  const error = await readJsonBody(request, scheduleBody).then(
    () => null,
    (e: unknown) => e,
  );
  assert.ok(error instanceof ApiError, String(error));
  assert.equal(error.status, 400);
  assert.match(error.message, /^body: the request ended before its body was read/);
});
