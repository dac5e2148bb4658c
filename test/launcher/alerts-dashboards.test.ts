/**
 * Alert delivery with two real dashboards (`npm run web`, each runs an evaluator) and two real
 * workers (each runs one too) against a local HTTP receiver for Slack and the webhook: one process
 * of the four evaluates at a time, each transition arrives once, and SIGKILL of the evaluating
 * dashboard (launcher and next-server at once, a crash) hands over without a duplicate or a gap.
 * The worker-only case, and receivers that hang or fail, are in test/integration/alerts-delivery.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { EVALUATOR_CLAIM } from "../../lib/alerts/evaluator-claim";
import { claimName } from "../../lib/claims/name";
import { createDeliveryBed, createFaultyReceiversBed, hookBodies, slackTexts } from "../support/alert-delivery";
import { startHttpReceiver } from "../support/http-receiver";
import { startWebServer, type TestBed, type TestWebServer } from "../support/stack";

const EVALUATING = /alerts: evaluating here/;
const beds: TestBed[] = [];
const webs: TestWebServer[] = [];
after(async () => {
  for (const web of webs) await web.kill();
  for (const bed of beds) await bed.close();
});

async function until(label: string, probe: () => boolean | Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${label}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test("two dashboards and two workers: each transition reaches Slack and the webhook once; killing the evaluating dashboard loses none and repeats none", async () => {
  const receiver = await startHttpReceiver();
  const { bed, env } = await createDeliveryBed(receiver);
  beds.push(bed);
  // The dashboards first, so one of them takes the evaluation; the workers then stand by.
  for (let i = 0; i < 2; i++) webs.push(await startWebServer(bed, env));
  await until("a dashboard evaluates", () => webs.some((web) => EVALUATING.test(web.output())));
  const workers = [await bed.startWorker(env), await bed.startWorker(env)];
  const outputs = () => [...webs.map((web) => web.output()), ...workers.map((worker) => worker.output())];
  await new Promise((r) => setTimeout(r, 3_000)); // three evaluation cycles
  assert.equal(outputs().filter((output) => EVALUATING.test(output)).length, 1, "one process of four evaluates");
  const leader = webs.find((web) => EVALUATING.test(web.output()))!;
  // The Claims page names the evaluator's holder from this field: "held by the web server".
  const holder = JSON.parse((await bed.claims.hget(bed.keys.claimMeta(EVALUATOR_CLAIM), "holder")) ?? "{}") as {
    rebuild?: string;
  };
  assert.equal(holder.rebuild, "web");

  const claim = claimName(bed.definitions.rebuilds.get("a")!.outputPath);
  const outboxEmpty = async () => (await bed.main.zcard(bed.keys.alertsOutbox)) === 0;
  await bed.claims.hset(bed.keys.claimSkips, claim, "3");
  await until(
    "firing skips alert on both receivers",
    () => hookBodies(receiver.requests).length >= 1 && slackTexts(receiver.requests).length >= 1,
  );
  await until("nothing in flight", outboxEmpty);

  await leader.kill();
  // The condition ends while nobody evaluates: the next evaluator must still deliver the resolve.
  await bed.claims.hdel(bed.keys.claimSkips, claim);
  await until("another process evaluates", () => {
    const others = outputs().filter((_, i) => webs[i] !== leader);
    return others.some((output) => EVALUATING.test(output));
  });
  await until(
    "resolved skips alert after the takeover",
    () => hookBodies(receiver.requests).length >= 2 && slackTexts(receiver.requests).length >= 2,
  );
  await bed.claims.hset(bed.keys.claimSkips, claim, "4");
  await until(
    "a second firing",
    () => hookBodies(receiver.requests).length >= 3 && slackTexts(receiver.requests).length >= 3,
  );
  await until("nothing in flight", outboxEmpty);
  await new Promise((r) => setTimeout(r, 3_000)); // three more cycles: nothing further may arrive

  const bodies = hookBodies(receiver.requests);
  assert.deepEqual(
    bodies.map((b) => b.status),
    ["firing", "resolved", "firing"],
  );
  assert.ok(bodies.every((b) => b.alert.labels.alertname === "skips" && b.alert.labels.claim === claim));
  assert.equal(new Set(bodies.map((b) => b.deliveryId)).size, 3, "three distinct deliveries");
  const texts = slackTexts(receiver.requests);
  assert.equal(texts.length, 3);
  assert.match(texts[0]!, /FIRING.*skips/);
  assert.match(texts[1]!, /RESOLVED.*skips/);
  assert.match(texts[2]!, /FIRING.*skips/);
  assert.equal(await bed.main.xlen(bed.keys.alertsTransitions), 3, "three transitions recorded");
  const evaluatorsNow = outputs().filter((output, i) => webs[i] !== leader && EVALUATING.test(output));
  assert.equal(evaluatorsNow.length, 1, "after the kill, again one process evaluates");
  for (const worker of workers) await worker.stop();
});

test("a dashboard that evaluates answers its API while a receiver hangs and another answers 500; the fine one gets every transition", async () => {
  const OPERATOR_TOKEN = "operator-token-for-tests-0123456789";
  const receiver = await startHttpReceiver();
  const { bed, env: hookEnv } = await createFaultyReceiversBed(receiver);
  beds.push(bed);
  const web = await startWebServer(bed, {
    ...hookEnv,
    CLAIMWATCH_OPERATOR_TOKEN: `tester:${OPERATOR_TOKEN}`,
  });
  webs.push(web);
  await until("the dashboard evaluates", () => EVALUATING.test(web.output()));
  const claim = claimName(bed.definitions.rebuilds.get("b")!.outputPath);
  await bed.claims.hset(bed.keys.claimSkips, claim, "1");
  await until("the firing at the fine receiver", () => receiver.requests.some((r) => r.path === "/fine"));

  const get = async (path: string) => {
    const response = await fetch(`${web.url}${path}`, { headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  // Answered while a delivery of this very process hangs (each hung request lasts the send
  // timeout; a retry hangs again, so a response that came after one gave up is asked again).
  let answeredDuringHang = false;
  for (let attempt = 0; attempt < 5 && !answeredDuringHang; attempt++) {
    await until("a delivery hanging", () => receiver.hanging() > 0, 90_000);
    const [health, alerts] = await Promise.all([get("/api/health"), get("/api/alerts")]);
    assert.equal(health.status, 200, JSON.stringify(health.body));
    assert.equal(alerts.status, 200, JSON.stringify(alerts.body));
    assert.match(JSON.stringify(alerts.body), /"alertname":"skips"/);
    answeredDuringHang = receiver.hanging() > 0;
  }
  assert.ok(answeredDuringHang, "the API answered while a delivery hung");

  // Evaluation goes on meanwhile: the resolve reaches the fine receiver; the failing one is retried.
  await bed.claims.hdel(bed.keys.claimSkips, claim);
  await until("the resolve at the fine receiver", () =>
    receiver.requests.some(
      (r) => r.path === "/fine" && (JSON.parse(r.body) as { status: string }).status === "resolved",
    ),
  );
  await until("a retry to the failing receiver", () => receiver.requests.filter((r) => r.path === "/fail").length >= 2);
});
