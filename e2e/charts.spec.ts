/**
 * The pictures draw the runs that exist: timeline marks, duration-trend points and percentile
 * lines, buckets when a lane has more runs than pixels, the server's counted buckets zoomed out
 * (7 d), a run's steps as a Gantt, and the Rebuilds page's last-30-runs strip. Asserted on the
 * drawn SVG elements, against the API.
 */
import { expect, test } from "@playwright/test";
import type { Timeline } from "../lib/api/timeline";
import { countedBuckets } from "../lib/runs/counted-lanes";
import { seedRunInto as upsertRunInto } from "../test/support/runs";
import type { RunRecord } from "../lib/runs/types";
import { stackRedisForSpec } from "./support/live";
import { operatorHeaders, stack } from "./support/stack";

// axe and six pages per test: generous on a loaded 2-core machine (a hang guard, not a timing goal).
test.describe.configure({ mode: "serial", timeout: 240_000 });
test.use({ extraHTTPHeaders: operatorHeaders() });

const redis = stackRedisForSpec();

function run(id: string, rebuild: string, startedAt: number, durationMs: number, extra: Partial<RunRecord> = {}) {
  return {
    id,
    jobId: id,
    attempt: 1,
    rebuild,
    tenant: null,
    createdAt: startedAt - 50,
    startedAt,
    finishedAt: startedAt + durationMs,
    durationMs,
    status: "rebuilt" as const,
    ...extra,
  };
}

test("timeline and duration trend draw the runs of the window; a run's steps draw as a Gantt", async ({
  page,
  request,
}) => {
  const { url } = stack();
  const now = Date.now();
  const tx = redis.main.multi();
  const seeded = [20, 22, 25, 31, 40, 55].map((seconds, i) =>
    run(`e2e-chart-${i}-a1`, "incidents", now - (6 - i) * 3_600_000, seconds * 1_000, {
      tenant: "acme",
      ...(i === 5 ? { status: "failed" as const } : {}),
      steps: [
        {
          name: "fetch",
          status: "done",
          startedAt: now - (6 - i) * 3_600_000,
          finishedAt: now - (6 - i) * 3_600_000 + 5_000,
        },
        {
          name: "render",
          status: i === 5 ? "failed" : "done",
          startedAt: now - (6 - i) * 3_600_000 + 5_000,
          finishedAt: now - (6 - i) * 3_600_000 + seconds * 1_000,
        },
      ],
    }),
  );
  for (const record of seeded) upsertRunInto(tx, redis.keys, record);
  await tx.exec();

  await page.goto(`${url}/runs`);
  const timeline = page.locator('[data-chart="timeline"]');
  await expect(timeline).toBeVisible();
  const api = (await (await request.get(`${url}/api/runs/timeline?range=24h`)).json()) as Timeline;
  for (const record of seeded) {
    await expect(
      timeline.locator(`[data-lane="incidents / acme"] [data-mark="run"][data-run-id="${record.id}"]`),
    ).toHaveAttribute("data-status", record.status);
  }
  const lanes = new Set(api.runs.map((r) => (r.tenant ? `${r.rebuild} / ${r.tenant}` : r.rebuild)));
  await expect(timeline.locator("[data-lane]")).toHaveCount(lanes.size);

  const trend = page.locator('[data-chart="duration-trend"]');
  await page.getByRole("combobox", { name: "Rebuild" }).last().selectOption("incidents");
  await expect(trend).toHaveAttribute("data-rebuild", "incidents");
  const finished = api.runs.filter(
    (r) => r.rebuild === "incidents" && r.startedAt && r.finishedAt && r.durationMs !== null && r.status !== "skipped",
  );
  await expect(trend.locator('[data-mark="run"]')).toHaveCount(finished.length);
  for (const record of seeded) await expect(trend.locator(`[data-run-id="${record.id}"]`)).toHaveCount(1);
  await expect(trend.locator('path[data-mark="p50"]')).toHaveAttribute("d", /^M/);
  await expect(trend.locator('path[data-mark="p95"]')).toHaveAttribute("d", /^M/);
  // The slowest run is drawn highest (smallest y).
  const ys = await Promise.all(
    seeded.map(async (r) => Number(await trend.locator(`[data-run-id="${r.id}"]`).getAttribute("cy"))),
  );
  expect(Math.min(...ys)).toBe(ys[5]);

  // The Runs page filtered to a rebuild starts its lanes and trend on it (helper-136: the trend
  // showed another rebuild's durations above that rebuild's runs).
  await page.goto(`${url}/runs?rebuild=incidents`);
  await expect(page.locator('[data-chart="duration-trend"]')).toHaveAttribute("data-rebuild", "incidents");
  await expect(page.getByRole("combobox", { name: "Lanes" })).toHaveValue("incidents");
  await page.goto(`${url}/runs`);

  // Click a mark: its run's page, with the steps as a Gantt.
  await timeline.locator(`[data-run-id="${seeded[5]!.id}"]`).click();
  await expect(page).toHaveURL(new RegExp(`/runs/${seeded[5]!.id}$`));
  const gantt = page.locator('[data-chart="steps"]');
  await expect(gantt.locator('[data-mark="step"]')).toHaveCount(2);
  await expect(gantt.locator('[data-step="render"]')).toHaveAttribute("data-status", "failed");
  const fetchBox = (await gantt.locator('[data-step="fetch"]').boundingBox())!;
  const renderBox = (await gantt.locator('[data-step="render"]').boundingBox())!;
  expect(renderBox.x).toBeGreaterThanOrEqual(fetchBox.x + fetchBox.width - 1); // render starts after fetch
  expect(renderBox.width).toBeGreaterThan(fetchBox.width);
});

test("a lane with more runs than pixels draws buckets whose counts add up to its runs", async ({ page, request }) => {
  const { url } = stack();
  const now = Date.now();
  const tx = redis.main.multi();
  const count = 600;
  for (let i = 0; i < count; i++) {
    upsertRunInto(tx, redis.keys, run(`e2e-many-${i}-a1`, "slow-archive", now - 23 * 3_600_000 + i * 60_000, 30_000));
  }
  await tx.exec();
  await page.goto(`${url}/runs`);
  const lane = page.locator('[data-chart="timeline"] [data-lane="slow-archive"]');
  await expect(lane.locator('[data-mark="bucket"]').first()).toBeVisible();
  await expect(lane.locator('[data-mark="run"]')).toHaveCount(0);
  const api = (await (await request.get(`${url}/api/runs/timeline?range=24h`)).json()) as Timeline;
  const inLane = api.runs.filter((r) => r.rebuild === "slow-archive" && !r.tenant).length;
  const counts = await lane
    .locator('[data-mark="bucket"]')
    .evaluateAll((els) => els.reduce((sum, el) => sum + Number(el.getAttribute("data-count")), 0));
  expect(counts).toBe(inLane);
  expect(await lane.locator('[data-mark="bucket"]').count()).toBeLessThan(inLane);
});

test("zoomed out (7 d) the timeline draws counted buckets that add up to the API's, link to the lane's runs, and show a rebuild's tenants", async ({
  page,
  request,
}) => {
  const { url } = stack();
  await page.goto(`${url}/runs`);
  await page.getByRole("button", { name: "last 7d" }).click();
  const timeline = page.locator('[data-chart="timeline"][data-view="buckets"]');
  await expect(timeline).toBeVisible();
  const lane = timeline.locator('[data-lane="slow-archive"]');
  await expect(lane.locator('[data-mark="bucket"]').first()).toBeVisible();
  const week = (await (await request.get(`${url}/api/runs/timeline?range=7d`)).json()) as Timeline;
  expect(week.view).toBe("buckets");
  const counted = countedBuckets(week.counted!, week.bucketMs!)
    .filter((b) => b.rebuild === "slow-archive")
    .reduce((sum, b) => sum + Object.values(b.counts).reduce((a, n) => a + (n ?? 0), 0), 0);
  // The counters hold every finished run the records hold (the 600 seeded above among them).
  const day = (await (await request.get(`${url}/api/runs/timeline?range=24h`)).json()) as Timeline;
  const finishedToday = day.runs.filter((r) => r.rebuild === "slow-archive" && r.finishedAt !== null).length;
  expect(counted).toBeGreaterThanOrEqual(Math.max(600, finishedToday));
  const drawn = await lane
    .locator('[data-mark="bucket"]')
    .evaluateAll((els) => els.reduce((sum, el) => sum + Number(el.getAttribute("data-count")), 0));
  expect(drawn).toBe(counted);
  // Hover details name the outcomes; the trend plots bucket means.
  await expect(lane.locator('[data-mark="bucket"] title').first()).toContainText("rebuilt");
  const trend = page.locator('[data-chart="duration-trend"][data-view="buckets"]');
  await page.getByRole("combobox", { name: "Rebuild" }).last().selectOption("slow-archive");
  await expect(trend.locator('[data-mark="bucket-mean"]').first()).toBeVisible();

  // One rebuild's tenants as lanes.
  await page.getByRole("combobox", { name: "Lanes" }).selectOption("incidents");
  await expect(timeline.locator('[data-lane="incidents / acme"] [data-mark="bucket"]').first()).toBeVisible();
  await expect(timeline.locator('[data-lane="slow-archive"]')).toHaveCount(0);

  // A bucket leads to its lane's runs.
  await timeline.locator('[data-lane="incidents / acme"] [data-mark="bucket"]').first().click();
  await expect(page).toHaveURL(/\/runs\?rebuild=incidents&tenant=acme$/);
});

test("Rebuilds: the last-30-runs strip draws one mark per recent run, with a legend", async ({ page, request }) => {
  const { url } = stack();
  await page.goto(`${url}/rebuilds`);
  await expect(page.getByRole("list", { name: "Run colours" })).toContainText("failed");
  const body = (await (await request.get(`${url}/api/rebuilds`)).json()) as {
    rebuilds: { name: string; tenant: string | null; recentRuns: { id: string }[] }[];
  };
  const acme = body.rebuilds.find((r) => r.name === "incidents" && r.tenant === "acme")!;
  const strip = page.locator('tr[data-rebuild="incidents"][data-tenant="acme"] [data-chart="run-strip"]');
  await expect(strip.locator('[data-mark="run"]')).toHaveCount(acme.recentRuns.length);
  await expect(strip.locator('[data-mark="run"][data-status="failed"]')).not.toHaveCount(0);
});
