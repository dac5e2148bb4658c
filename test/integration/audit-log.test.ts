/** The audit log: newest first, paged by cursor, trimmed to the retention by server time. */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { appendAudit, AUDIT_RETENTION_MS, listAudit } from "../../lib/audit/index";
import { createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { startTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = createRedis(server.url, "worker");
after(() => client.disconnect());

test("entries come back newest first, in pages, with their JSON detail", async () => {
  const keys = redisKeys(uniquePrefix());
  const ids: string[] = [];
  for (let i = 0; i < 7; i++) {
    ids.push(
      await appendAudit(client, keys, {
        actor: `op-${i}`,
        action: i % 2 ? "trigger" : "force-release",
        reason: `reason ${i}`,
        result: "done",
        detail: { n: i, nested: { ok: true } },
      }),
    );
  }
  const first = await listAudit(client, keys, { limit: 3 });
  assert.deepEqual(
    first.entries.map((e) => e.id),
    ids.slice(4).reverse(),
  );
  assert.equal(first.entries[0]!.actor, "op-6");
  assert.equal(first.entries[0]!.action, "force-release");
  assert.equal(first.entries[1]!.action, "trigger");
  assert.deepEqual(first.entries[0]!.detail, { n: 6, nested: { ok: true } });
  assert.ok(Math.abs(first.entries[0]!.at - Date.now()) < 5_000);
  const second = await listAudit(client, keys, { limit: 3, cursor: first.nextCursor });
  assert.deepEqual(
    second.entries.map((e) => e.id),
    ids.slice(1, 4).reverse(),
  );
  const last = await listAudit(client, keys, { limit: 3, cursor: second.nextCursor });
  assert.deepEqual(
    last.entries.map((e) => e.id),
    [ids[0]],
  );
  assert.equal(last.nextCursor, null);
  await assert.rejects(listAudit(client, keys, { limit: 0 }), RangeError);
});

test("entries older than 90 days are trimmed on append; younger ones are kept", async () => {
  const keys = redisKeys(uniquePrefix());
  const day = 86_400_000;
  const now = Date.now();
  assert.equal(AUDIT_RETENTION_MS, 90 * day);
  await client.xadd(keys.auditLog, `${now - 91 * day}-0`, "actor", "old", "detail", "{}");
  await client.xadd(keys.auditLog, `${now - 89 * day}-0`, "actor", "recent", "detail", "{}");
  await appendAudit(client, keys, { actor: "new", action: "trigger", reason: "r", result: "done", detail: {} });
  const { entries } = await listAudit(client, keys);
  assert.deepEqual(
    entries.map((e) => e.actor),
    ["new", "recent"],
  );
});
