/**
 * Alert delivery with real worker processes (each runs an evaluator; one evaluates at a time) and
 * a local HTTP receiver for the Slack and webhook bodies: each transition arrives once; killing
 * the evaluating worker hands over without a duplicate or a gap; a receiver that hangs or fails
 * holds only its own deliveries.
 */
import assert from "node:assert/strict";
import crypto from "node:crypto";
import { after, test } from "node:test";
import { EVALUATOR_CLAIM } from "../../lib/alerts/evaluator-claim";
import { claimName } from "../../lib/claims/name";
import type { TestBed, TestWorker } from "../support/stack";
import { startHttpReceiver } from "../support/http-receiver";
import {
  createDeliveryBed,
  createFaultyReceiversBed,
  HOOK_SECRET,
  hookBodies,
  slackTexts,
  type HookBody,
} from "../support/alert-delivery";

const SECRET = HOOK_SECRET;
const beds: TestBed[] = [];
after(async () => {
  for (const bed of beds) await bed.close();
});

async function outboxEmpty(bed: TestBed): Promise<void> {
  for (;;) {
    if ((await bed.main.zcard(bed.keys.alertsOutbox)) === 0) return;
    await new Promise((r) => setTimeout(r, 100));
  }
}

test("two workers: each transition reaches Slack and the webhook once, signed; killing the evaluator loses none and repeats none", async () => {
  const receiver = await startHttpReceiver();
  const { bed, env } = await createDeliveryBed(receiver);
  beds.push(bed);
  const workers = [await bed.startWorker(env), await bed.startWorker(env)];
  const claim = claimName(bed.definitions.rebuilds.get("a")!.outputPath);

  await bed.claims.hset(bed.keys.claimSkips, claim, "3");
  await receiver.waitFor(
    (r) => hookBodies(r, "/hook").length >= 1 && slackTexts(r).length >= 1,
    60_000,
    "firing skips alert on both receivers",
  );
  await outboxEmpty(bed); // nothing in flight: a kill now must cause neither a repeat nor a loss

  const evaluating = (w: TestWorker) => /alerts: evaluating here/.test(w.output());
  const leader = workers.find(evaluating);
  assert.ok(leader, "one worker evaluates");
  assert.equal(workers.filter(evaluating).length, 1, "exactly one worker evaluates");
  // The Claims page names the evaluator's holder from this field (evaluatorHolderLabel).
  const holder = JSON.parse((await bed.claims.hget(bed.keys.claimMeta(EVALUATOR_CLAIM), "holder")) ?? "{}") as {
    rebuild?: string;
  };
  assert.equal(holder.rebuild, "worker");
  await leader.stop("SIGKILL");
  // The condition ends while nobody evaluates: the next evaluator must still deliver the resolve.
  await bed.claims.hdel(bed.keys.claimSkips, claim);
  const survivor = workers.find((w) => w !== leader)!;
  await survivor.waitFor(/alerts: evaluating here/, 60_000);
  await receiver.waitFor(
    (r) => hookBodies(r, "/hook").length >= 2 && slackTexts(r).length >= 2,
    60_000,
    "resolved skips alert after the takeover",
  );
  await bed.claims.hset(bed.keys.claimSkips, claim, "4");
  await receiver.waitFor(
    (r) => hookBodies(r, "/hook").length >= 3 && slackTexts(r).length >= 3,
    60_000,
    "a second firing",
  );
  await outboxEmpty(bed);
  // A few more evaluation cycles: nothing further may arrive.
  const cyclesFrom = Number(await bed.main.get(bed.keys.alertsVersion));
  await bed.claims.hset(bed.keys.claimSkips, "output:unrelated-marker", "1"); // below atLeast: no alert
  await new Promise((r) => setTimeout(r, 3_000)); // three evaluation cycles
  assert.equal(Number(await bed.main.get(bed.keys.alertsVersion)), cyclesFrom, "no further commit without a change");

  const hooks = receiver.requests.filter((r) => r.path === "/hook");
  const bodies = hookBodies(receiver.requests, "/hook");
  assert.deepEqual(
    bodies.map((b) => b.status),
    ["firing", "resolved", "firing"],
  );
  assert.ok(bodies.every((b) => b.alert.labels.alertname === "skips" && b.alert.labels.claim === claim));
  assert.equal(bodies[0]!.alert.labels.rebuild, "a");
  assert.match(bodies[0]!.alert.annotations.link!, /^http:\/\/127\.0\.0\.1:\d+\/rebuilds$/);
  assert.equal(new Set(bodies.map((b) => b.deliveryId)).size, 3, "three distinct deliveries");
  for (const request of hooks) {
    const expected = `sha256=${crypto.createHmac("sha256", SECRET).update(request.body).digest("hex")}`;
    assert.equal(request.headers["x-claimwatch-signature-256"], expected, "HMAC-SHA256 of the body");
    assert.equal(request.headers["x-claimwatch-delivery"], (JSON.parse(request.body) as HookBody).deliveryId);
  }
  const texts = slackTexts(receiver.requests);
  assert.equal(texts.length, 3);
  assert.match(texts[0]!, /FIRING.*skips/);
  assert.match(texts[1]!, /RESOLVED.*skips/);
  assert.match(texts[2]!, /FIRING.*skips/);
  const transitions = await bed.main.xlen(bed.keys.alertsTransitions);
  assert.equal(transitions, 3, "three transitions recorded");
});

test("a receiver that hangs or answers 500 holds only its own deliveries: others get theirs, rebuilds run, the 500 is retried", async () => {
  const receiver = await startHttpReceiver();
  const { bed, env: hookEnv } = await createFaultyReceiversBed(receiver);
  beds.push(bed);
  const worker = await bed.startWorker(hookEnv);
  await worker.waitFor(/alerts: evaluating here/);
  const claim = claimName(bed.definitions.rebuilds.get("b")!.outputPath);
  await bed.claims.hset(bed.keys.claimSkips, claim, "1");
  await receiver.waitFor((r) => r.some((x) => x.path === "/fine"), 60_000, "delivery to the fine receiver");
  await receiver.waitFor((r) => r.filter((x) => x.path === "/fail").length >= 2, 60_000, "a retry to the failing one");
  assert.ok(
    receiver.requests.some((r) => r.path === "/hang"),
    "the hung receiver was asked",
  );

  // The worker goes on rebuilding while a receiver hangs.
  const jobId = await bed.trigger("b", { version: "v1" });
  const run = await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 60_000);
  assert.equal(run.status, "rebuilt");
  // And evaluation goes on: the resolve reaches the fine receiver.
  await bed.claims.hdel(bed.keys.claimSkips, claim);
  await receiver.waitFor(
    (r) => hookBodies(r, "/fine").some((b) => b.status === "resolved"),
    60_000,
    "the resolve at the fine receiver",
  );

  const failed = JSON.parse((await bed.main.hget(bed.keys.alertsReceivers, "failing"))!) as {
    status: string;
    error: string;
  };
  assert.equal(failed.status, "failed");
  assert.match(failed.error, /HTTP 500/);
  receiver.setMode("/fail", "ok");
  await receiver.waitFor(
    (r) => hookBodies(r, "/fail").filter((b) => b.status === "resolved").length >= 1,
    120_000,
    "the failing receiver's deliveries after it recovers",
  );
  const failBodies = hookBodies(receiver.requests, "/fail");
  // Retries repeat the same delivery id; the firing arrives before the resolve.
  const ids = [...new Set(failBodies.map((b) => b.deliveryId))];
  assert.equal(ids.length, 2);
  assert.equal(failBodies.find((b) => b.deliveryId === ids[0])!.status, "firing");
  const fine = JSON.parse((await bed.main.hget(bed.keys.alertsReceivers, "fine"))!) as { status: string };
  assert.equal(fine.status, "delivered");
});
