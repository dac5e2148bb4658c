/**
 * Issue 15's claim trail on the real stack: a claim released by its holder and one that expires
 * without release (its holder gone) both show on the rebuild's page with their holder, and the
 * expired one under "Recently ended" on Claims. The claims are taken through the worker's own
 * code (withClaim / acquireClaim) on slow-archive's claim name while nothing runs it (this spec
 * comes before the ones that rebuild it).
 */
import { expect, test } from "@playwright/test";
import type { ApiRebuild } from "../lib/api/rebuilds";
import { acquireClaim } from "../lib/claims";
import { holdClaim, stackRedisForSpec } from "./support/live";
import { operatorHeaders, stack } from "./support/stack";

test.describe.configure({ mode: "serial" });
test.use({ extraHTTPHeaders: operatorHeaders() });

const redis = stackRedisForSpec();

test("the rebuild page's claim trail shows a release and an expiry with its last holder; Claims lists the ended claim", async ({
  page,
  request,
}) => {
  const { url } = stack();
  const { rebuilds } = (await (await request.get(`${url}/api/rebuilds`)).json()) as { rebuilds: ApiRebuild[] };
  const entry = rebuilds.find((r) => r.name === "slow-archive");
  expect(entry?.claim, "slow-archive is not running").toBeNull();
  const { claimName, name, tenant } = entry!;

  // 1. Held and released by its holder (the worker's withClaim).
  const held = holdClaim(redis, claimName, name);
  await held.held;
  await held.release();
  // 2. Held by a holder that then vanishes: nothing refreshes or releases it.
  const gone = await acquireClaim(
    redis.claims,
    redis.keys,
    claimName,
    { workerId: "e2e-vanished-worker", runId: "run-e2e-trail-a1", rebuild: name, version: "e2e-gone" },
    { ttlMs: 1_500, refreshEveryMs: 500 },
  );
  expect(gone.status).toBe("acquired");
  const listed = async () => {
    const body = (await (await request.get(`${url}/api/claims`)).json()) as { claims: { name: string }[] };
    return body.claims.some((c) => c.name === claimName);
  };
  await expect.poll(listed, { timeout: 15_000 }).toBe(false);

  await page.goto(
    `${url}/rebuilds/${encodeURIComponent(name)}${tenant ? `/${encodeURIComponent(tenant)}` : ""}#claim-trail`,
  );
  const trail = page.getByRole("table", { name: new RegExp(`^Claim trail of ${name}`) });
  await expect(trail).toBeVisible();
  const expired = trail.locator('tr[data-trail="expired"]').first();
  await expect(expired).toContainText("Expired without release");
  await expect(expired).toContainText("e2e-vanished-worker");
  await expect(expired.getByRole("link", { name: "run run-e2e-trail-a1" })).toBeVisible();
  await expect(trail.locator('tr[data-trail="released"]').first()).toContainText("Released by its holder");
  await expect(trail.locator('tr[data-trail="released"]').first()).toContainText("e2e-holder");
  // Newest first: the expiry, the vanished holder's grant, the release, the first grant.
  const kinds = await trail
    .locator("tr[data-trail]")
    .evaluateAll((rows) => rows.map((r) => r.getAttribute("data-trail")));
  expect(kinds.slice(0, 4)).toEqual(["expired", "acquired", "released", "acquired"]);

  await page.goto(`${url}/claims`);
  const ended = page.getByRole("table", { name: "Recently ended claims" });
  const row = ended.locator('tr[data-ended="expired"]', { hasText: "e2e-vanished-worker" });
  await expect(row).toBeVisible();
  await expect(row.getByRole("link", { name: new RegExp(`^${name}`) })).toHaveAttribute(
    "href",
    new RegExp(`/rebuilds/${name}.*#claim-trail$`),
  );

  // The page's search applies to the ended claims too (a part of the name, any case).
  await page.goto(`${url}/claims?q=${encodeURIComponent(claimName.slice(-8).toUpperCase())}`);
  await expect(ended.locator('tr[data-ended="expired"]', { hasText: "e2e-vanished-worker" })).toBeVisible();
  await page.goto(`${url}/claims?q=no-such-claim-e2e`);
  await expect(page.getByText("No recently ended claim's name contains “no-such-claim-e2e”.")).toBeVisible();
  await expect(ended).toHaveCount(0);
});
