/**
 * The operator's flows on the real stack (launcher: embedded Redis, Next.js, worker), in Debian
 * Chromium. Waits on the app's own API and UI state, never on fixed sleeps.
 */
import { expect, test, type APIRequestContext, type Page } from "@playwright/test";
import type { ApiClaim } from "../lib/api/claims";
import type { RunRecord } from "../lib/runs/types";
import { stack, operatorHeaders } from "./support/stack";

test.describe.configure({ mode: "serial" });
// These specs act as the operator through a Bearer header (the login flow has its own spec).
test.use({ extraHTTPHeaders: operatorHeaders() });

async function claimsOf(request: APIRequestContext, rebuild: string): Promise<ApiClaim[]> {
  const { url } = stack();
  const body = (await (await request.get(`${url}/api/claims`)).json()) as { claims: ApiClaim[] };
  return body.claims.filter((c) => c.rebuild === rebuild);
}

async function runsOf(request: APIRequestContext, query: string): Promise<RunRecord[]> {
  const { url } = stack();
  return ((await (await request.get(`${url}/api/runs?${query}`)).json()) as { runs: RunRecord[] }).runs;
}

async function workerPid(request: APIRequestContext): Promise<number> {
  const { url } = stack();
  const body = (await (await request.get(`${url}/api/workers`)).json()) as { workers: { pid: number }[] };
  expect(body.workers).toHaveLength(1);
  return body.workers[0]!.pid;
}

async function openRebuildNow(page: Page, label: string) {
  await page.goto(`${stack().url}/rebuilds`);
  await page.getByRole("button", { name: `Rebuild now: ${label}` }).click();
  return page.getByRole("form", { name: `Rebuild ${label} now` });
}

async function shot(page: Page, name: string, testInfo: { outputPath: (name: string) => string }) {
  await page.screenshot({ path: testInfo.outputPath(`${name}.png`), fullPage: true });
}

test("Rebuild now on slow-archive (double-clicked: one request): the run is running, its claim's TTL counts down and its heartbeat renews", async ({
  page,
  request,
}, testInfo) => {
  const form = await openRebuildNow(page, "slow-archive");
  await expect(form.getByRole("status")).toHaveText(/Would run now/);
  // A double click sends one request (two raced, and the form said "Already queued" for its own).
  const posts: string[] = [];
  page.on("request", (r) => {
    if (r.method() === "POST" && r.url().includes("/api/rebuilds/slow-archive/runs")) posts.push(r.url());
  });
  await form.getByRole("button", { name: "Queue rebuild" }).dblclick();
  await expect(form.getByRole("alert")).toContainText("Queued as job");
  await expect(form.getByRole("alert")).not.toContainText("Already queued");
  expect(posts).toHaveLength(1);

  await expect
    .poll(async () => (await runsOf(request, "rebuild=slow-archive&status=running")).length, { timeout: 20_000 })
    .toBe(1);

  await page.goto(`${stack().url}/claims`);
  const row = page.locator("tr[data-claim]", { hasText: "slow-archive" });
  await expect(row).toBeVisible();
  const ttl = row.locator('[data-field="ttl"]');
  // Counts down between refreshes: two reads in a row, the later at least 0.5 s lower (a refresh
  // sets it back up, so a read just before one is no floor for the next cycle).
  const seen: number[] = [];
  await expect
    .poll(async () => {
      seen.push(Number(await ttl.getAttribute("data-ttl-ms")));
      return seen.some((ms, i) => i > 0 && ms < seen[i - 1]! - 500);
    })
    .toBe(true);
  await expect(row).toContainText("live");
  await shot(page, "claims", testInfo);

  // The Rebuilds list counts it down between reads as well (it showed the TTL of its last read).
  await page.goto(`${stack().url}/rebuilds`);
  const listed = page.locator("tr", { hasText: "slow-archive" }).locator('[data-field="ttl-left"]');
  const seenListed: number[] = [];
  await expect
    .poll(async () => {
      seenListed.push(Number(await listed.getAttribute("data-ttl-ms")));
      return seenListed.some((ms, i) => i > 0 && ms < seenListed[i - 1]! - 500);
    })
    .toBe(true);

  const [before] = await claimsOf(request, "slow-archive");
  await expect
    .poll(async () => (await claimsOf(request, "slow-archive"))[0]?.refreshedAt ?? 0, { timeout: 15_000 })
    .toBeGreaterThan(before!.refreshedAt!);

  // Searched (any part of the name, any case), the row stays through the claim's live refreshes:
  // the browser's cache once kept only names starting with the text, and emptied the list.
  await page.goto(`${stack().url}/claims?q=SLOW-ARCH`);
  const searched = page.locator("tr[data-claim]", { hasText: "slow-archive" });
  await expect(searched).toBeVisible();
  const [seenBefore] = await claimsOf(request, "slow-archive");
  await expect
    .poll(async () => (await claimsOf(request, "slow-archive"))[0]?.refreshedAt ?? 0, { timeout: 15_000 })
    .toBeGreaterThan(seenBefore!.refreshedAt!);
  await page.waitForTimeout(1_000); // the refresh's event reaches the page
  await expect(searched).toBeVisible();
  await expect(page.getByText(/No active claim's name contains/)).toHaveCount(0);

  await page.goto(`${stack().url}/runs`);
  await expect(page.getByRole("table", { name: "Runs" }).locator('tr[data-status="running"]')).toContainText(
    "slow-archive",
  );
  await shot(page, "runs", testInfo);
});

test("Rebuild now again: recorded as a neutral skip, consecutive skips rise on Claims and Rebuilds", async ({
  page,
  request,
}, testInfo) => {
  const form = await openRebuildNow(page, "slow-archive");
  await expect(form.getByRole("status")).toHaveText(/would be skipped: held by .+, \d+ s left/);
  await shot(page, "rebuilds-preview", testInfo);
  // A run the preview says is skipped is queued only on purpose (issue 15).
  await expect(form.getByRole("button", { name: "Queue rebuild" })).toHaveCount(0);
  await form.getByRole("button", { name: "Queue anyway" }).click();
  await expect(form.getByRole("alert")).toContainText("Queued as job");

  await expect
    .poll(async () => (await runsOf(request, "rebuild=slow-archive&status=skipped")).length, { timeout: 20_000 })
    .toBe(1);
  const row = page.locator('tr[data-rebuild="slow-archive"]');
  await expect(row.locator('[data-field="skips"]')).toHaveText("1");
  await shot(page, "rebuilds", testInfo);

  await page.goto(`${stack().url}/runs?rebuild=slow-archive&status=skipped`);
  const skipped = page.getByRole("table", { name: "Runs" }).locator('tr[data-status="skipped"]');
  await expect(skipped).toContainText("claim-held");
  const badge = skipped.locator('[data-status="skipped"]');
  await expect(badge).toHaveClass(/bg-slate-100/); // neutral, not red

  await page.goto(`${stack().url}/claims`);
  await expect(page.locator("tr[data-claim]", { hasText: "slow-archive" }).locator('[data-field="skips"]')).toHaveText(
    "1",
  );
});

test("a frozen worker's claim turns Stale; force release marks it releasing and is audited; on SIGCONT the worker aborts and the claim is free", async ({
  page,
  request,
}, testInfo) => {
  const pid = await workerPid(request);
  const [running] = await runsOf(request, "rebuild=slow-archive&status=running");
  expect(running).toBeTruthy();
  process.kill(pid, "SIGSTOP");
  try {
    // Opened once the server reads it stale: what the page shows then must still count up.
    await expect.poll(async () => (await claimsOf(request, "slow-archive"))[0]?.stale, { timeout: 30_000 }).toBe(true);
    await page.goto(`${stack().url}/claims`);
    const row = page.locator("tr[data-claim]", { hasText: "slow-archive" });
    await expect(row.getByText("Stale", { exact: true })).toBeVisible({ timeout: 30_000 });
    await expect(row).toContainText(/no refresh for \d+ s|has no live heartbeat/);
    // Live, with no read in between (the page takes events, it does not poll): it counts up.
    const overdue = async () => Number(/no refresh for (\d+) s/.exec((await row.textContent()) ?? "")?.[1] ?? -1);
    await expect.poll(overdue, { timeout: 15_000 }).toBeGreaterThanOrEqual(0);
    const first = await overdue();
    await expect.poll(overdue, { timeout: 15_000 }).toBeGreaterThanOrEqual(first + 2);
    await shot(page, "claims-stale", testInfo);

    await row.getByRole("button", { name: "Force release" }).click();
    const dialog = page.getByRole("dialog", { name: "Force release this claim?" });
    const [claim] = await claimsOf(request, "slow-archive");
    await expect(dialog.locator('[data-field="token"]')).toHaveText(claim!.token);
    await expect(dialog.locator('[data-field="release-effect"]')).toContainText("Nobody else can take the claim");
    // It offers the lever that does stop the rebuild: cancel its job.
    await expect(
      dialog.locator('[data-field="cancel-instead"]').getByRole("button", { name: /^Cancel: job / }),
    ).toBeVisible();
    await dialog.getByLabel("Reason (for the audit log)").fill("worker frozen at 02:00 (e2e)");
    await dialog.getByRole("button", { name: "Release claim" }).click();
    await expect(page.getByRole("alert").filter({ hasText: "Released" })).toBeVisible();
    // The frozen holder cannot acknowledge: the claim stays taken (releasing) so that nobody
    // else writes the output while the holder's step may still run, and cannot be released twice.
    await expect(row.locator('[data-state="releasing"]')).toBeVisible();
    await expect(row).toContainText("waiting for the holder to stop");
    await expect(row.getByRole("button", { name: "Force release" })).toHaveCount(0);
    // The rebuild's page and the Rebuilds list say so too, not "held … stale" (helper-143).
    await page.goto(`${stack().url}/rebuilds/slow-archive`);
    await expect(page.locator('[data-field="claim"] [data-state="releasing"]')).toContainText(
      /Releasing: force-released by .+; waiting for the holder to stop/,
    );
    await expect(page.locator('[data-field="claim"]')).not.toContainText("(force release)");
    await page.goto(`${stack().url}/rebuilds`);
    await expect(page.locator("tr", { hasText: "slow-archive" }).locator('[data-state="releasing"]')).toContainText(
      /Releasing: force-released by .+; free in at most/,
    );

    await page.goto(`${stack().url}/audit`);
    const entry = page.locator('tr[data-action="force-release"][data-result="done"]');
    await expect(entry).toContainText("worker frozen at 02:00 (e2e)");
    await shot(page, "audit", testInfo);

    // Past its heartbeat's TTL the frozen worker is not live, and not forgotten either: the
    // Workers page lists it as having stopped beating without shutting down.
    await page.goto(`${stack().url}/workers`);
    await expect(page.locator('[data-field="silent-workers"] [data-silent-worker]')).toContainText(`-${pid}-`, {
      timeout: 30_000,
    });
    // Its run's page: its step stops where the worker went silent (or where another process
    // closed the run) instead of counting up (black-box helper-168: a frozen worker's run page
    // counted up a dead step).
    await page.goto(`${stack().url}/runs/${encodeURIComponent(running!.id)}`);
    const openStep = page.locator('[data-chart="steps"] text', { hasText: /its worker went silent|the run ended/ });
    await expect(openStep).toHaveCount(1, { timeout: 15_000 });
    const shown = await openStep.textContent();
    await page.waitForTimeout(2_500);
    expect(await openStep.textContent()).toBe(shown);
  } finally {
    process.kill(pid, "SIGCONT");
  }
  await expect
    .poll(
      async () =>
        (await runsOf(request, `jobId=${encodeURIComponent(running!.jobId)}`)).find((r) => r.id === running!.id)
          ?.status,
      {
        timeout: 30_000,
      },
    )
    // A force release never costs the requested version: the woken attempt stops and its job
    // is deferred to run again (issue 14), or it was superseded by a later attempt of the job.
    .toMatch(/^(aborted|superseded|deferred)$/);
  // Woken, the holder stopped and acknowledged (or the release window ran out): the claim is free.
  await page.goto(`${stack().url}/claims`);
  await expect(
    page.locator("tr[data-claim]", { hasText: "slow-archive" }).locator('[data-state="releasing"]'),
  ).toHaveCount(0, {
    timeout: 30_000,
  });
  await page.goto(`${stack().url}/runs/${running!.id}`);
  await expect(
    page.locator('[data-status="aborted"], [data-status="superseded"], [data-status="deferred"]').first(),
  ).toBeVisible();
});

test("force release with a token that changed hands says so and releases nothing", async ({ page, request }) => {
  const { url } = stack();
  // Make sure a slow-archive claim exists (the aborted job may have been retried already).
  if ((await claimsOf(request, "slow-archive")).length === 0) {
    await request.post(`${url}/api/rebuilds/slow-archive/runs`, { data: { version: "e2e-a", force: true } });
  }
  await expect.poll(async () => (await claimsOf(request, "slow-archive")).length, { timeout: 30_000 }).toBe(1);

  await page.goto(`${url}/claims`);
  const row = page.locator("tr[data-claim]", { hasText: "slow-archive" });
  // By keyboard: Enter opens the dialog with the focus in its reason; Escape closes it.
  await row.getByRole("button", { name: "Force release" }).focus();
  await page.keyboard.press("Enter");
  const dialog = page.getByRole("dialog", { name: "Force release this claim?" });
  await expect(dialog.getByLabel("Reason (for the audit log)")).toBeFocused();
  // Too short a reason says why the release waits; Enter sends nothing then (black-box helper-182).
  await page.keyboard.type("ab");
  await expect(dialog.locator("#release-reason-hint")).toHaveText("At least 3 characters (2 so far); Enter releases.");
  await expect(dialog.getByRole("button", { name: "Release claim" })).toBeDisabled();
  await page.keyboard.press("Enter");
  await expect(dialog.getByLabel("Reason (for the audit log)")).toHaveValue("ab");
  await page.keyboard.press("Escape");
  await expect(dialog).toHaveCount(0);
  await row.getByRole("button", { name: "Force release" }).click();
  const shownToken = await dialog.locator('[data-field="token"]').textContent();

  // Meanwhile: another operator releases it and a new rebuild takes the claim.
  const released = await request.post(`${url}/api/claims/release`, {
    data: { name: (await claimsOf(request, "slow-archive"))[0]!.name, token: shownToken, reason: "someone else" },
  });
  expect(released.status()).toBe(200);
  await request.post(`${url}/api/rebuilds/slow-archive/runs`, { data: { version: "e2e-b", force: true } });
  await expect
    .poll(async () => (await claimsOf(request, "slow-archive"))[0]?.token ?? shownToken, { timeout: 30_000 })
    .not.toBe(shownToken);
  const [newHolder] = await claimsOf(request, "slow-archive");

  await dialog.getByLabel("Reason (for the audit log)").fill("stale row clicked late");
  // Enter in the reason releases, as the button does.
  await dialog.getByLabel("Reason (for the audit log)").press("Enter");
  await expect(page.getByRole("alert").filter({ hasText: "changed hands" })).toContainText("Nothing was released");
  const [still] = await claimsOf(request, "slow-archive");
  expect(still?.token).toBe(newHolder!.token);

  await page.goto(`${url}/audit`);
  await expect(page.locator('tr[data-action="force-release"][data-result="refused"]')).toContainText(
    "stale row clicked late",
  );
});

test("a run page shows step output and a final status; parcels shows its build hash", async ({
  page,
  request,
}, testInfo) => {
  const { url } = stack();
  const queued = await request.post(`${url}/api/rebuilds/parcels/runs`, { data: {} });
  expect(queued.status()).toBe(202);
  const { jobId } = (await queued.json()) as { jobId: string };
  await expect
    .poll(async () => (await runsOf(request, `jobId=${jobId}`))[0]?.status, { timeout: 60_000 })
    .toBe("rebuilt");
  const [run] = await runsOf(request, `jobId=${jobId}`);

  await page.goto(`${url}/runs/${run!.id}`);
  await expect(page.locator('[data-status="rebuilt"]').first()).toBeVisible();
  await expect(page.locator('[data-field="build-hash"]')).toHaveText(/^[0-9a-f]{32}$/);
  await expect(page.getByLabel("Run log")).toContainText("[tile] wrote");
  await expect(page.getByLabel("Run log")).toContainText("published build");
  // Log times in the one time format (the viewer's zone, with milliseconds), not the worker's ISO stamps.
  await expect(page.getByLabel("Run log")).toContainText(/\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC/);
  await expect(page.getByLabel("Run log")).not.toContainText(/\d\d:\d\d:\d\d\.\d{3}Z /);
  await shot(page, "run", testInfo);

  await page.goto(`${url}/workers`);
  await expect(page.getByRole("table", { name: "Workers" })).toContainText(String(await workerPid(request)));
  // What the worker enforces on its steps: a cgroup per step here (CI runs as root, cgroup v2 writable).
  const workers = (await (await request.get(`${url}/api/workers`)).json()) as { workers: { containment: string }[] };
  expect(workers.workers[0]!.containment).toBe("cgroup");
  // As root, each step sees its output's published builds read-only (a mount namespace per worker).
  await expect(page.locator('[data-containment="cgroup"]')).toHaveText("cgroup per step; builds read-only to steps");
  expect((workers.workers[0] as { publishedBuilds?: string }).publishedBuilds).toBe("read-only");
  await shot(page, "workers", testInfo);
});

test("Rebuild now by keyboard: its button names the panel it opens; Escape or Close gives the focus back to that button", async ({
  page,
}) => {
  const form = await openRebuildNow(page, "slow-archive");
  const button = page.getByRole("button", { name: "Rebuild now: slow-archive" });
  await expect(button).toHaveAttribute("aria-expanded", "true");
  const panelId = await form.getAttribute("id");
  expect(panelId).toBeTruthy();
  await expect(button).toHaveAttribute("aria-controls", panelId!);
  await form.getByLabel("Version (optional)").focus();
  await page.keyboard.press("Escape");
  await expect(form).toHaveCount(0);
  await expect(button).toBeFocused();
  await expect(button).toHaveAttribute("aria-expanded", "false");
  await expect(button).not.toHaveAttribute("aria-controls");
  // Open again from the keyboard; Close by its button.
  await page.keyboard.press("Enter");
  await form.getByRole("button", { name: "Close" }).click();
  await expect(form).toHaveCount(0);
  await expect(button).toBeFocused();
});
