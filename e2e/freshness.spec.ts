/**
 * What the dashboard shows is current, or says it is not (black-box helper-168): a silent stream
 * (a hung server, a half-open connection) is noticed and claims are not judged stale by counting
 * alone; the Rebuilds list follows force releases and schedule changes made elsewhere; ages are
 * judged on the server's clock, whatever the viewer's clock says.
 */
import path from "node:path";
import { expect, test, type Route } from "@playwright/test";
import type { ApiRebuildPage } from "../lib/api/rebuilds";
import { claimName } from "../lib/claims/name";
import { holdClaim, stackRedisForSpec } from "./support/live";
import { stack } from "./support/stack";
import { operatorHeaders } from "./support/stack";

test.describe.configure({ mode: "serial" });
test.use({ extraHTTPHeaders: operatorHeaders() });

const redis = stackRedisForSpec();

test("a silent stream is not live: the page polls, and a claim it cannot see refreshed is unknown, not Stale, with Force release disabled", async ({
  page,
}) => {
  const { url } = stack();
  const name = "output:/tmp/e2e-fresh/silent";
  const hold = holdClaim(redis, name, "e2e-silent"); // TTL 60 s, refreshed every 10 s
  await hold.held;
  try {
    await page.clock.install();
    await page.goto(`${url}/claims`);
    const status = page.getByRole("status", { name: "Live updates" });
    await expect(status).toHaveAttribute("data-live", "live");
    const row = page.locator(`tr[data-claim="${name}"]`);
    await expect(row).toContainText("e2e-holder");
    await expect(row.getByRole("button", { name: "Force release" })).toBeEnabled();

    // From now on the server answers nothing (as when it is SIGSTOPped): new requests hang, and
    // the open stream says nothing while the page's clock runs 30 s ahead.
    const held: Route[] = [];
    await page.route("**/api/**", (route) => void held.push(route));
    await page.clock.fastForward(30_000);

    await expect(status).toHaveAttribute("data-live", "offline");
    await expect(status).toHaveText("Not live: polling");
    await expect(row.locator('[data-state="unknown"]')).toBeVisible();
    await expect(row).toContainText(/not refreshed for \d+ s: the dashboard lost its connection/);
    await expect(row.getByText("Stale", { exact: true })).toHaveCount(0);
    await expect(row.getByRole("button", { name: "Force release" })).toBeDisabled();
    // It polls meanwhile (the reads hang, as the server does).
    expect(held.some((r) => new URL(r.request().url()).pathname === "/api/claims")).toBe(true);

    // The server answers again: the page reconnects by itself, and the claim is live again.
    await page.unroute("**/api/**");
    for (const route of held) await route.abort().catch(() => {});
    await page.clock.fastForward(15_000); // the watchdog gives up on the hung connection
    await expect(status).toHaveAttribute("data-live", "live", { timeout: 30_000 });
    await expect(row.locator('[data-state="unknown"]')).toHaveCount(0);
    await expect(row.getByRole("button", { name: "Force release" })).toBeEnabled();
  } finally {
    await hold.release();
  }
});

test("the Rebuilds list shows a force release and a schedule pause made elsewhere, without a reload", async ({
  page,
  request,
}) => {
  const { url, dataDir } = stack();
  const name = claimName(path.join(dataDir, "data", "builds", "parcels"));
  const hold = holdClaim(redis, name, "parcels"); // refreshed every 10 s: the release is noticed within 10 s
  await hold.held;
  try {
    const rows = ((await (await request.get(`${url}/api/rebuilds?q=parcels`)).json()) as ApiRebuildPage).rebuilds;
    const token = rows.find((r) => r.name === "parcels")?.claim?.token;
    expect(token, "the held claim is parcels' claim").toBeTruthy();

    await page.goto(`${url}/rebuilds`);
    await expect(page.getByRole("status", { name: "Live updates" })).toHaveAttribute("data-live", "live");
    const row = page.locator('tr[data-rebuild="parcels"]');
    await expect(row).toContainText("e2e-holder");
    const released = await request.post(`${url}/api/claims/release`, {
      data: { name, token, reason: "e2e: released elsewhere" },
    });
    expect(released.status()).toBe(200);
    // Before its holder notices (its next refresh, up to 10 s away), the list says Releasing.
    await expect(row.locator('[data-state="releasing"]')).toContainText(/Releasing: force-released by alice/, {
      timeout: 4_000,
    });
  } finally {
    await hold.release().catch(() => {});
  }

  const schedule = (action: "pause" | "resume") =>
    request.post(`${url}/api/rebuilds/incidents/schedule`, {
      data: { action, tenant: "globex", reason: `e2e: ${action}d elsewhere` },
    });
  const globex = page.locator('tr[data-rebuild="incidents"][data-tenant="globex"]');
  await expect(globex).toBeVisible();
  await expect(globex.locator('[data-field="paused"]')).toHaveCount(0);
  expect((await schedule("pause")).status()).toBe(200);
  try {
    await expect(globex.locator('[data-field="paused"]')).toBeVisible({ timeout: 4_000 });
  } finally {
    expect((await schedule("resume")).status()).toBe(200);
  }
  await expect(globex.locator('[data-field="paused"]')).toHaveCount(0, { timeout: 4_000 });
});

test("a viewer whose clock is 2 minutes fast sees ages on the server's clock: live workers beat seconds ago", async ({
  page,
}) => {
  await page.clock.install({ time: Date.now() + 120_000 });
  await page.goto(`${stack().url}/workers`);
  const beat = page.getByRole("table", { name: "Workers" }).locator("tr[data-worker] time").first();
  await expect(beat).toHaveText(/^(just now|[0-9] s ago|1[0-4] s ago)$/);
  // And after the first reads, still (the answers and the stream set the page's clock).
  await expect(page.getByRole("status", { name: "Live updates" })).toHaveAttribute("data-live", "live");
  await expect(beat).toHaveText(/^(just now|[0-9] s ago|1[0-4] s ago)$/);
});

test("an open Workers tab keeps each live worker's last heartbeat seconds old, though beats are no live events", async ({
  page,
}) => {
  await page.goto(`${stack().url}/workers`);
  await expect(page.getByRole("status", { name: "Live updates" })).toHaveAttribute("data-live", "live");
  const beat = page.getByRole("table", { name: "Workers" }).locator("tr[data-worker] time").first();
  await expect(beat).toHaveText(/^(just now|[0-9] s ago|1[0-4] s ago)$/);
  // Longer than a beat's TTL with the tab left open: the page re-read the beats meanwhile (black-box
  // helper-182 saw "2 min 1 s ago" for workers beating every 5 s, the header saying Live).
  await page.waitForTimeout(20_000);
  await expect(beat).toHaveText(/^(just now|[0-9] s ago|1[0-4] s ago)$/);
});
