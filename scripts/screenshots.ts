/**
 * Refreshes the README's screenshots in docs/: every page, light and dark, against the real stack
 * (the e2e global setup: `npm start`'s launcher with embedded Redis, the shipped claimwatch.yaml)
 * after a few real rebuilds, driven by Debian's Chromium. Not a test.
 *
 *   npx next build && node --import tsx scripts/screenshots.ts
 */
import fs from "node:fs";
import path from "node:path";
import { chromium, type Page } from "@playwright/test";
import globalSetup from "../e2e/support/global-setup";
import type { Stack } from "../e2e/support/stack";

const OUT = "docs";
const SETTLE_MS = 800;

const teardown = await globalSetup();
const stack = JSON.parse(process.env.CLAIMWATCH_E2E_STACK!) as Stack;
const headers = { authorization: `Bearer ${stack.tokens.operator}`, "content-type": "application/json" };

async function api(method: string, url: string, body?: unknown): Promise<unknown> {
  const response = await fetch(`${stack.url}${url}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  if (!response.ok) throw new Error(`${method} ${url}: ${response.status} ${await response.text()}`);
  return response.json();
}

async function runsOf(query: string): Promise<{ id: string; status: string }[]> {
  return ((await api("GET", `/api/runs?${query}`)) as { runs: { id: string; status: string }[] }).runs;
}

async function waitFor(check: () => Promise<boolean>, what: string, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu"],
});
try {
  // Some history: two versions of parcels and a tenant of incidents rebuilt, a repeat skipped,
  // and a slow rebuild running while the pictures are taken (its claim on Claims).
  await api("POST", "/api/rebuilds/parcels/runs", { version: "2026-12-01" });
  await api("POST", "/api/rebuilds/incidents/runs", { tenant: "acme", version: "v1" });
  await waitFor(async () => (await runsOf("rebuild=parcels&status=rebuilt")).length >= 1, "parcels rebuilt");
  await api("POST", "/api/rebuilds/parcels/runs", { version: "2026-12-01" });
  await api("POST", "/api/rebuilds/parcels/runs", { version: "2026-12-02" });
  await waitFor(async () => (await runsOf("rebuild=parcels&status=rebuilt")).length >= 2, "parcels rebuilt twice");
  await api("POST", "/api/rebuilds/slow-archive/runs", { version: "screenshots", force: true });
  await waitFor(async () => (await runsOf("rebuild=slow-archive&status=running")).length >= 1, "slow-archive running");
  const [parcelsRun] = await runsOf("rebuild=parcels&status=rebuilt");

  const pages: [name: string, url: string, width: number][] = [
    ["claims", "/claims", 1280],
    ["rebuilds", "/rebuilds", 1280],
    ["rebuild", "/rebuilds/parcels", 1280],
    ["runs", "/runs", 1280],
    ["run", `/runs/${parcelsRun!.id}`, 1280],
    ["queue", "/queue", 1280],
    ["workers", "/workers", 1280],
    ["alerts", "/alerts", 1280],
    ["audit", "/audit", 1280],
    ["claims-390", "/claims", 390],
  ];
  for (const scheme of ["light", "dark"] as const) {
    const context = await browser.newContext({
      extraHTTPHeaders: { authorization: headers.authorization },
      colorScheme: scheme,
      viewport: { width: 1280, height: 900 },
    });
    const page: Page = await context.newPage();
    for (const [name, url, width] of pages) {
      await page.setViewportSize({ width, height: width < 600 ? 844 : 900 });
      const response = await page.goto(`${stack.url}${url}`);
      if (!response?.ok()) throw new Error(`${url}: ${response?.status()}`);
      await page.waitForLoadState("networkidle").catch(() => {});
      await page.waitForTimeout(SETTLE_MS);
      const file = path.join(OUT, `${name}-${scheme}.png`);
      await page.screenshot({ path: file, fullPage: width >= 600 });
      console.log(`${file} (${fs.statSync(file).size} bytes)`);
    }
    await context.close();
  }
} finally {
  await browser.close();
  await teardown();
}
