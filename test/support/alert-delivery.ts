/**
 * The alert-delivery test bed shared by the worker-only (test/integration/alerts-delivery) and the
 * dashboards (test/launcher/alerts-dashboards) tests: a bed whose alerts go to Slack and a signed
 * webhook on a local HTTP receiver, evaluated every second, and readers of what arrived.
 */
import type { HttpReceiver, ReceivedRequest } from "./http-receiver";
import { createTestBed, slowStep, type TestBed } from "./stack";

export const HOOK_SECRET = "a-webhook-secret-for-tests";

export interface HookBody {
  deliveryId: string;
  status: "firing" | "resolved";
  test: boolean;
  alert: { id: string; labels: Record<string, string>; annotations: Record<string, string> };
}

export const hookBodies = (requests: ReceivedRequest[], path = "/hook") =>
  requests.filter((r) => r.path === path).map((r) => JSON.parse(r.body) as HookBody);

export const slackTexts = (requests: ReceivedRequest[], path = "/slack") =>
  requests.filter((r) => r.path === path).map((r) => (JSON.parse(r.body) as { text: string }).text);

/**
 * A bed with one rebuild `a` and its alerts sent to `receiver` (`/slack`, and `/hook` signed with
 * HOOK_SECRET); `env` is what every process of the bed needs to find them. Only the skips rule
 * (at least 2) and the ones not switched off here can fire.
 */
export async function createDeliveryBed(
  receiver: HttpReceiver,
): Promise<{ bed: TestBed; env: Record<string, string> }> {
  const bed = await createTestBed(
    { a: { output: "out/a", steps: [slowStep(0)] } },
    {
      alerts: {
        evaluateEvery: "1s",
        repeatEvery: "2s",
        receivers: [
          { slack: { webhookUrlEnv: "TEST_SLACK_URL" } },
          { webhook: { url: `${receiver.url}/hook`, secretEnv: "TEST_HOOK_SECRET" } },
        ],
        rules: { skips: { atLeast: 2 }, workerMissing: false, redisUnsafe: false },
      },
    },
  );
  return { bed, env: { TEST_SLACK_URL: `${receiver.url}/slack`, TEST_HOOK_SECRET: HOOK_SECRET } };
}

/**
 * A bed with one rebuild `b` whose alerts (skips ≥ 1) go to three webhooks on `receiver`: `hung`
 * (`/hang`, never answered), `failing` (`/fail`, HTTP 500) and `fine` (`/fine`); the receiver's
 * modes are set here.
 */
export async function createFaultyReceiversBed(
  receiver: HttpReceiver,
): Promise<{ bed: TestBed; env: Record<string, string> }> {
  receiver.setMode("/hang", "hang");
  receiver.setMode("/fail", "fail");
  const bed = await createTestBed(
    { b: { output: "out/b", steps: [slowStep(0)] } },
    {
      alerts: {
        evaluateEvery: "1s",
        receivers: [
          { webhook: { name: "hung", url: `${receiver.url}/hang`, secretEnv: "TEST_HOOK_SECRET" } },
          { webhook: { name: "failing", url: `${receiver.url}/fail`, secretEnv: "TEST_HOOK_SECRET" } },
          { webhook: { name: "fine", url: `${receiver.url}/fine`, secretEnv: "TEST_HOOK_SECRET" } },
        ],
        rules: { skips: { atLeast: 1 }, workerMissing: false, redisUnsafe: false },
      },
    },
  );
  return { bed, env: { TEST_HOOK_SECRET: HOOK_SECRET } };
}
