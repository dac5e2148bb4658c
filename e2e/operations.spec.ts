/**
 * Issue 15's operator actions in the browser, on the real stack: cancel a running slow-archive
 * from its rebuild page (cancelled, claim gone, no retry, no step process left), the queue view
 * explaining a deferred job (and cancelling it), retry of the cancelled run, pause/resume of a
 * schedule. Waits on the app's own API, never on fixed sleeps.
 */
import { expect, test, type APIRequestContext } from "@playwright/test";
import type { ApiClaim } from "../lib/api/claims";
import type { QueueView } from "../lib/operations/queue-view";
import type { RunRecord } from "../lib/runs/types";
import { pidsWithMarker } from "../test/support/markers";
import { operatorHeaders, stack } from "./support/stack";

test.describe.configure({ mode: "serial" });
test.use({ extraHTTPHeaders: operatorHeaders() });

const api = (path: string) => `${stack().url}${path}`;

async function runsOfJob(request: APIRequestContext, jobId: string): Promise<RunRecord[]> {
  return (
    (await (await request.get(api(`/api/runs?jobId=${encodeURIComponent(jobId)}`))).json()) as { runs: RunRecord[] }
  ).runs;
}
async function claimsOf(request: APIRequestContext, rebuild: string): Promise<ApiClaim[]> {
  const body = (await (await request.get(api("/api/claims"))).json()) as { claims: ApiClaim[] };
  return body.claims.filter((c) => c.rebuild === rebuild);
}
async function queueOf(request: APIRequestContext, rebuild: string): Promise<QueueView> {
  return (await (await request.get(api(`/api/queue?rebuild=${rebuild}`))).json()) as QueueView;
}
async function trigger(request: APIRequestContext, version: string): Promise<string> {
  const response = await request.post(api("/api/rebuilds/slow-archive/runs"), { data: { version, force: true } });
  expect(response.status()).toBe(202);
  return ((await response.json()) as { jobId: string }).jobId;
}

/** Earlier specs leave slow-archive jobs behind: cancel them so this spec starts with a free output. */
async function clearSlowArchive(request: APIRequestContext) {
  for (const job of (await queueOf(request, "slow-archive")).jobs) {
    if (job.state !== "failed") {
      await request.post(api(`/api/jobs/${encodeURIComponent(job.jobId)}/cancel`), { data: { reason: "e2e set-up" } });
    }
  }
  await expect.poll(async () => (await claimsOf(request, "slow-archive")).length, { timeout: 30_000 }).toBe(0);
}

let cancelledRun: RunRecord;

test("cancel a running slow-archive on its rebuild page: cancelled, claim gone, not retried, no step process left", async ({
  page,
  request,
}) => {
  await clearSlowArchive(request);
  const jobId = await trigger(request, "e2e-cancel");
  await expect.poll(async () => (await runsOfJob(request, jobId))[0]?.status, { timeout: 30_000 }).toBe("running");
  const [running] = await runsOfJob(request, jobId);
  const stepMarker = { name: "CLAIMWATCH_RUN_ID", value: running!.id };
  await expect.poll(() => pidsWithMarker(stepMarker).length).toBeGreaterThan(0);

  await page.goto(api("/rebuilds/slow-archive"));
  await expect(page.getByRole("heading", { name: "Rebuild slow-archive" })).toBeVisible();
  await expect(page.locator('[data-field="claim-timing"]')).toContainText("TTL 20");
  const row = page.getByRole("table", { name: "Queue" }).locator(`tr[data-job="${jobId}"]`);
  await expect(row).toHaveAttribute("data-state", "active");
  // By keyboard (helper-136): Enter opens the form with the focus in its reason, Escape closes
  // it and gives the focus back to the button.
  const cancelButton = row.getByRole("button", { name: `Cancel: job ${jobId}` });
  const form = row.getByRole("form", { name: `Cancel: job ${jobId}` });
  await cancelButton.focus();
  await page.keyboard.press("Enter");
  await expect(form.getByLabel("Reason (for the audit log)")).toBeFocused();
  await page.keyboard.press("Escape");
  await expect(form).toHaveCount(0);
  await expect(cancelButton).toBeFocused();
  await cancelButton.click();
  await form.getByLabel("Reason (for the audit log)").fill("wrong input (e2e)");
  const answered = page.waitForResponse(
    (r) => r.request().method() === "POST" && r.url().endsWith(`/api/jobs/${encodeURIComponent(jobId)}/cancel`),
  );
  await form.getByRole("button", { name: "Cancel job" }).click();
  expect(((await (await answered).json()) as { status: string }).status).toBe("cancelling");
  // The answer shows until the worker has stopped the job: slow-archive's step exits on SIGTERM
  // at once, so the row may already have turned cancelled, saying why (that row replaces the one
  // with the answer; both are what an operator should see).
  await expect(
    row
      .getByRole("status")
      .filter({ hasText: "Cancelling" })
      .or(row.locator('[data-field="why"]').filter({ hasText: "cancelled by alice (operator): wrong input (e2e)" })),
  ).toBeVisible();

  // slow-archive's step exits on SIGTERM; killGrace (5 s) bounds it otherwise. The record is
  // written after the claim's release, so the claim is gone when the run says cancelled.
  await expect
    .poll(async () => (await runsOfJob(request, jobId))[0]?.status, { timeout: 5_000 + 1_000 + 2_000 })
    .toBe("cancelled");
  expect(await claimsOf(request, "slow-archive")).toHaveLength(0);
  expect(pidsWithMarker(stepMarker)).toEqual([]);
  // Not retried: BullMQ failed it (final), one attempt only; BullMQ keeps it among its failed
  // jobs, and the queue (API, page, CLI) says cancelled, not failed.
  await expect
    .poll(async () => (await queueOf(request, "slow-archive")).jobs.find((j) => j.jobId === jobId)?.state)
    .toBe("cancelled");
  await expect(row).toHaveAttribute("data-state", "cancelled");
  await expect(row.getByText("cancelled", { exact: true }).first()).toBeVisible();
  await expect(row.locator('[data-field="why"]')).toContainText("cancelled by alice (operator): wrong input (e2e)");
  expect((await runsOfJob(request, jobId)).map((r) => r.status)).toEqual(["cancelled"]);
  cancelledRun = (await runsOfJob(request, jobId))[0]!;
  expect(cancelledRun.reason).toBe("cancelled by alice (operator): wrong input (e2e)");

  await page.goto(api(`/runs/${cancelledRun.id}`));
  await expect(page.locator('[data-status="cancelled"]').first()).toBeVisible();
  await page.goto(api("/audit"));
  await expect(page.locator('tr[data-action="cancel"][data-result="done"]').first()).toContainText("wrong input (e2e)");
});

test("retry the cancelled run from its page: a forced job of the same version that links back", async ({
  page,
  request,
}) => {
  await page.goto(api(`/runs/${cancelledRun.id}`));
  await page.getByRole("button", { name: `Retry: run ${cancelledRun.id}` }).click();
  await page.getByLabel("Reason (for the audit log)").fill("input fixed (e2e)");
  await page.getByRole("button", { name: "Retry run" }).click();
  const status = page.getByRole("status").filter({ hasText: "Queued as job" });
  await expect(status).toBeVisible();
  const jobId = /job (\S+)\./.exec((await status.textContent()) ?? "")![1]!;
  await expect
    .poll(async () => (await runsOfJob(request, jobId))[0]?.retryOf, { timeout: 30_000 })
    .toBe(cancelledRun.id);
  expect((await runsOfJob(request, jobId))[0]!.version).toBe("e2e-cancel");
  await request.post(api(`/api/jobs/${encodeURIComponent(jobId)}/cancel`), { data: { reason: "e2e clean-up" } });
});

test("the queue view shows a job deferred behind another version's claim, with its reason; cancel removes it", async ({
  page,
  request,
}) => {
  await clearSlowArchive(request);
  const holder = await trigger(request, "e2e-hold");
  await expect
    .poll(async () => (await claimsOf(request, "slow-archive"))[0]?.version, { timeout: 30_000 })
    .toBe("e2e-hold");
  const waiting = await trigger(request, "e2e-wait");
  await expect
    .poll(async () => (await runsOfJob(request, waiting)).some((r) => r.status === "deferred"), { timeout: 30_000 })
    .toBe(true);

  await page.goto(api("/queue"));
  const row = page.getByRole("table", { name: "Queue" }).locator(`tr[data-job="${waiting}"]`);
  // Between two looks at the claim it is delayed (deferred up to 30 s); briefly active when it looks.
  await expect(row).toHaveAttribute("data-state", "delayed", { timeout: 40_000 });
  await expect(row.locator('[data-field="wait-kind"]')).toHaveText("deferred");
  await expect(row.locator('[data-field="why"]')).toContainText(/is held by .+ building e2e-hold/);
  await expect(row.locator('[data-field="next-attempt"]')).toBeVisible();

  await row.getByRole("button", { name: `Cancel: job ${waiting}` }).click();
  await row.getByLabel("Reason (for the audit log)").fill("not needed (e2e)");
  await row.getByRole("button", { name: "Cancel job" }).dblclick();
  await expect
    .poll(async () => (await runsOfJob(request, waiting)).some((r) => r.status === "cancelled"), { timeout: 30_000 })
    .toBe(true);
  // The row goes with the job; the page still says what the cancel did (it said nothing).
  await expect(row).toHaveCount(0);
  await expect(page.locator('[data-field="queue-notice"]')).toHaveText(
    `Job ${waiting}: Cancelled: removed from the queue.`,
  );
  // One cancel, audited once, though the button was double-clicked.
  const audit = (await (await request.get(api("/api/audit?limit=20"))).json()) as {
    entries: { action: string; target?: string; detail?: Record<string, unknown> }[];
  };
  expect(audit.entries.filter((e) => e.action === "cancel" && JSON.stringify(e).includes(waiting))).toHaveLength(1);
  // The holder (another version) is untouched.
  expect((await claimsOf(request, "slow-archive"))[0]?.version).toBe("e2e-hold");
  await request.post(api(`/api/jobs/${encodeURIComponent(holder)}/cancel`), { data: { reason: "e2e clean-up" } });
});

test("pause and resume a tenant's schedule: shown as paused on its page, on Rebuilds and in the API", async ({
  page,
  request,
}) => {
  // Its next tick waits in the queue: not cancellable there, a link to pause the schedule instead.
  await page.goto(api("/queue"));
  const tick = page.locator("tr[data-job]", { hasText: "scheduled" }).filter({ hasText: "incidents / acme" });
  await expect(tick).toHaveCount(1);
  await expect(tick.getByRole("button", { name: /^Cancel/ })).toHaveCount(0);
  await tick.getByRole("link", { name: "pause schedule" }).click();
  await expect(page).toHaveURL(/\/rebuilds\/incidents\/acme#schedule-acme$/);

  const state = page.getByRole("group", { name: "State of incidents / acme" });
  await state.getByRole("button", { name: "Pause schedule: incidents / acme" }).click();
  await state.getByLabel("Reason (for the audit log)").fill("maintenance window (e2e)");
  await state.getByRole("button", { name: "Pause", exact: true }).click();
  await expect(state.locator('[data-field="paused"]')).toContainText("paused by alice (operator)");

  const rebuilds = (await (await request.get(api("/api/rebuilds"))).json()) as {
    rebuilds: { name: string; tenant: string | null; schedule: { paused: { reason: string } | null } | null }[];
  };
  const paused = rebuilds.rebuilds.filter((r) => r.schedule?.paused).map((r) => `${r.name}/${r.tenant}`);
  expect(paused).toEqual(["incidents/acme"]);
  await page.goto(api("/rebuilds"));
  await expect(page.locator('tr[data-rebuild="incidents"][data-tenant="acme"] [data-field="paused"]')).toBeVisible();
  await expect(page.locator('tr[data-rebuild="incidents"][data-tenant="globex"] [data-field="paused"]')).toHaveCount(0);

  await page.goto(api("/rebuilds/incidents/acme"));
  await state.getByRole("button", { name: "Resume schedule: incidents / acme" }).click();
  await state.getByLabel("Reason (for the audit log)").fill("done (e2e)");
  await state.getByRole("button", { name: "Resume", exact: true }).click();
  await expect(state.locator('[data-field="paused"]')).toHaveCount(0);
});

test("force release says when the attempt is retried and offers cancel; the aborted run links to the audit entry and the next attempt", async ({
  page,
  request,
}) => {
  test.setTimeout(150_000);
  await clearSlowArchive(request);
  const jobId = await trigger(request, "e2e-release");
  await expect.poll(async () => (await runsOfJob(request, jobId))[0]?.status, { timeout: 30_000 }).toBe("running");
  const [aborted] = await runsOfJob(request, jobId);

  await page.goto(api("/claims"));
  const row = page.locator("tr[data-claim]", { hasText: "slow-archive" });
  await row.getByRole("button", { name: "Force release" }).click();
  const dialog = page.getByRole("dialog", { name: "Force release this claim?" });
  await expect(dialog.locator('[data-field="release-effect"]')).toContainText(
    /The running attempt will be aborted and retried in \d+ s at the latest; to stop it, cancel instead\./,
  );
  await expect(
    dialog.locator('[data-field="cancel-instead"]').getByRole("button", { name: `Cancel: job ${jobId}` }),
  ).toBeVisible();
  // The keyboard stays in the dialog: Tab from its last control comes back to its first; Escape
  // closes it and gives the focus back to the button that opened it.
  const forceRelease = row.getByRole("button", { name: "Force release" });
  await dialog.getByRole("button", { name: "Close" }).focus();
  await page.keyboard.press("Tab");
  await page.keyboard.press("Tab");
  expect(await dialog.evaluate((element) => element.contains(document.activeElement))).toBe(true);
  await page.keyboard.press("Escape");
  await expect(dialog).toBeHidden();
  await expect(forceRelease).toBeFocused();
  await forceRelease.click();
  await dialog.getByLabel("Reason (for the audit log)").fill("stuck at 02:00 (e2e)");
  // A double click sends one release (the second was audited as a refusal by the same operator).
  await dialog.getByRole("button", { name: "Release claim" }).dblclick();
  await expect(page.getByRole("alert").filter({ hasText: "Released" })).toBeVisible();
  const audit = (await (await request.get(api("/api/audit?limit=50"))).json()) as {
    entries: { action: string; reason: string; result: string }[];
  };
  expect(
    audit.entries
      .filter((e) => e.action === "force-release" && e.reason === "stuck at 02:00 (e2e)")
      .map((e) => e.result),
  ).toEqual(["done"]);

  // The holder stops at its next refresh (5 s) plus killGrace; the next attempt follows.
  const next = `${jobId}-a2`;
  await expect
    .poll(async () => (await runsOfJob(request, jobId)).some((r) => r.id === next), { timeout: 60_000 })
    .toBe(true);

  await page.goto(api(`/runs/${aborted!.id}`));
  await expect(page.locator('[data-field="reason"]')).toContainText("force-released it (by alice (operator)");
  const release = page.locator('[data-field="force-released"]');
  await expect(release).toContainText("by alice (operator): “stuck at 02:00 (e2e)”");
  await expect(page.locator('[data-field="next-attempt"]').getByRole("link", { name: next })).toHaveAttribute(
    "href",
    `/runs/${next}`,
  );
  await release.getByRole("link", { name: /^audit entry / }).click();
  await expect(page).toHaveURL(/\/audit\?entry=\d+-\d+$/);
  const marked = page.locator('tr[aria-current="true"]');
  await expect(marked).toHaveAttribute("data-action", "force-release");
  await expect(marked).toContainText("stuck at 02:00 (e2e)");

  await request.post(api(`/api/jobs/${encodeURIComponent(jobId)}/cancel`), { data: { reason: "e2e clean-up" } });
});

test("an unknown rebuild or tenant page is a 404 that names the valid ones; an unknown run a 404 too", async ({
  page,
}) => {
  const unknown = await page.goto(api("/rebuilds/nope"));
  expect(unknown?.status()).toBe(404);
  await expect(page.getByRole("heading", { name: "Rebuild not found" })).toBeVisible();
  await expect(page.getByRole("status").filter({ hasText: "No rebuild named 'nope'." })).toBeVisible();
  await expect(
    page.getByRole("list", { name: "Rebuilds" }).getByRole("link", { name: "slow-archive" }),
  ).toHaveAttribute("href", "/rebuilds/slow-archive");

  const tenant = await page.goto(api("/rebuilds/incidents/initech"));
  expect(tenant?.status()).toBe(404);
  await expect(
    page.getByRole("status").filter({ hasText: "'initech' is not a tenant of rebuild 'incidents'." }),
  ).toBeVisible();
  await page.getByRole("list", { name: "Its pages" }).getByRole("link", { name: "incidents / acme" }).click();
  await expect(page.getByRole("heading", { name: "Rebuild incidents / acme" })).toBeVisible();

  // So is a run no record has (trimmed, or a mistyped link).
  const run = await page.goto(api("/runs/run-doesnotexist-a1"));
  expect(run?.status()).toBe(404);
  await expect(page.getByRole("heading", { name: "No such run" })).toBeVisible();
});
