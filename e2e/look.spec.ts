/**
 * Look and reach on the real stack: icons and manifest, no console errors (hydration included),
 * axe-core (no serious or critical violations) in light and dark, a 390 px viewport without
 * horizontal overflow, visible keyboard focus, one date format, and the login link pasted into
 * a tab already on /login.
 */
import AxeBuilder from "@axe-core/playwright";
import { expect, test, type Page } from "@playwright/test";
import type { RunRecord } from "../lib/runs/types";
import { writeTestRun as upsertRun } from "../test/support/runs";
import { stackRedis } from "./support/live";
import { operatorHeaders, stack } from "./support/stack";

// axe and six pages per test: generous on a loaded 2-core machine (a hang guard, not a timing goal).
test.describe.configure({ mode: "serial", timeout: 240_000 });

/** Every dashboard page, and a run's page when a run exists. */
async function pages(page: Page): Promise<string[]> {
  const { url } = stack();
  const body = (await (await page.request.get(`${url}/api/runs?limit=1`, { headers: operatorHeaders() })).json()) as {
    runs: RunRecord[];
  };
  const list = [
    "/claims",
    "/rebuilds",
    "/rebuilds/slow-archive",
    "/rebuilds/incidents/acme",
    "/queue",
    "/runs",
    "/workers",
    "/audit",
    "/alerts",
  ];
  if (body.runs[0]) list.push(`/runs/${body.runs[0].id}`);
  return list;
}

/** Console errors, uncaught page errors and failed same-origin requests (e.g. a 404 favicon). */
function watchProblems(page: Page): string[] {
  const problems: string[] = [];
  page.on("console", (message) => {
    if (message.type() === "error") problems.push(`console: ${message.text()}`);
  });
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  page.on("response", (response) => {
    if (response.url().startsWith(stack().url) && response.status() >= 400) {
      problems.push(`${response.status()} ${response.url()}`);
    }
  });
  return problems;
}

test.describe("as operator", () => {
  test.use({ extraHTTPHeaders: operatorHeaders() });

  test("icons and the web manifest are served; pages link them", async ({ page, request }) => {
    const { url } = stack();
    for (const file of ["/favicon.ico", "/icon.svg", "/icon-192.png", "/icon-512.png", "/apple-touch-icon.png"]) {
      const response = await request.get(`${url}${file}`);
      expect(response.status(), file).toBe(200);
    }
    const manifest = (await (await request.get(`${url}/manifest.webmanifest`)).json()) as {
      name: string;
      icons: { src: string }[];
    };
    expect(manifest.name).toBe("claimwatch");
    expect(manifest.icons.map((i) => i.src)).toContain("/icon-512.png");
    await page.goto(`${url}/claims`);
    await expect(page.locator('link[rel="manifest"]')).toHaveAttribute("href", "/manifest.webmanifest");
    await expect(page.locator('link[rel="icon"]').first()).toHaveAttribute("href", /favicon\.ico|icon\.svg/);
  });

  test("no console errors, page errors or failed requests on any page (Workers loaded five times, Rebuilds, Claims and a run three)", async ({
    page,
  }) => {
    const { url } = stack();
    const problems = watchProblems(page);
    for (const path of await pages(page)) {
      await page.goto(`${url}${path}`);
      await expect(page.getByRole("heading", { level: 1 })).toBeVisible();
      await page.waitForLoadState("networkidle");
    }
    for (let i = 0; i < 5; i++) {
      await page.goto(`${url}/workers`);
      await expect(page.getByRole("table", { name: "Workers" })).toBeVisible();
      await page.waitForLoadState("networkidle");
    }
    // And the pages whose lists the live stream re-reads as the layout hydrates (helper-136 saw
    // #418 on /rebuilds and a run's page now and then).
    const [, , , , , , , , , run] = await pages(page);
    for (let i = 0; i < 3; i++) {
      for (const path of ["/rebuilds", "/claims", ...(run ? [run] : [])]) {
        await page.goto(`${url}${path}`);
        await expect(page.getByRole("heading", { level: 1 })).toBeVisible();
        await page.waitForLoadState("networkidle");
      }
    }
    expect(problems).toEqual([]);
  });

  for (const scheme of ["light", "dark"] as const) {
    test(`axe: no serious or critical violations on any page (${scheme})`, async ({ page }) => {
      const { url } = stack();
      await page.emulateMedia({ colorScheme: scheme });
      const found: string[] = [];
      for (const path of await pages(page)) {
        await page.goto(`${url}${path}`);
        await expect(page.getByRole("heading", { level: 1 })).toBeVisible();
        expect(await page.evaluate(() => document.documentElement.classList.contains("dark"))).toBe(scheme === "dark");
        const result = await new AxeBuilder({ page }).analyze();
        for (const v of result.violations) {
          if (v.impact === "serious" || v.impact === "critical") {
            found.push(`${path}: ${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(" ")).join(" | ")}`);
          }
        }
      }
      expect(found).toEqual([]);
    });

    test(`390 px wide: no horizontal overflow, header wraps, actions reachable (${scheme})`, async ({ page }) => {
      const { url } = stack();
      await page.setViewportSize({ width: 390, height: 844 });
      await page.emulateMedia({ colorScheme: scheme });
      for (const path of await pages(page)) {
        await page.goto(`${url}${path}`);
        await expect(page.getByRole("heading", { level: 1 })).toBeVisible();
        const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        expect(overflow, `${path} overflows by ${overflow} px`).toBeLessThanOrEqual(0);
        for (const link of await page.getByRole("navigation", { name: "Main" }).getByRole("link").all()) {
          const box = (await link.boundingBox())!;
          expect(box.x + box.width, `${path}: nav link off-screen`).toBeLessThanOrEqual(390);
        }
      }
      // A picker holding a rebuild or tenant name of 64 characters (the longest allowed) stays on
      // the screen: a select is as wide as its widest option (helper-110: the Runs page scrolled).
      await page.goto(`${url}/runs`);
      await expect(page.getByRole("heading", { level: 1 })).toBeVisible();
      await expect(page.locator("main select").first()).toBeVisible();
      const pickers = await page.evaluate(() => {
        const selects = [...document.querySelectorAll<HTMLSelectElement>("main select")];
        for (const select of selects) select.add(new Option("x".repeat(64), "long-name-option"));
        return selects.length;
      });
      expect(pickers).toBeGreaterThanOrEqual(3);
      const widened = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      expect(widened, `/runs with 64-character names in its pickers overflows by ${widened} px`).toBeLessThanOrEqual(0);
      await page.goto(`${url}/rebuilds`);
      const button = page.getByRole("button", { name: "Rebuild now: slow-archive" });
      const box = (await button.boundingBox())!;
      expect(box.x + box.width).toBeLessThanOrEqual(390);
      expect(box.x).toBeGreaterThanOrEqual(0);
    });
  }

  test("dark mode follows the system and the toggle overrides it, kept across reloads", async ({ page }) => {
    const { url } = stack();
    await page.emulateMedia({ colorScheme: "dark" });
    await page.goto(`${url}/claims`);
    const html = page.locator("html");
    await expect(html).toHaveClass(/\bdark\b/);
    const body = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    const theme = page.getByLabel("Colour theme");
    await theme.selectOption("light");
    await expect(html).not.toHaveClass(/\bdark\b/);
    expect(await page.evaluate(() => getComputedStyle(document.body).backgroundColor)).not.toBe(body);
    await page.reload();
    await expect(html).not.toHaveClass(/\bdark\b/);
    await expect(theme).toHaveValue("light");
    await theme.selectOption("system");
    await expect(html).toHaveClass(/\bdark\b/);
    await page.emulateMedia({ colorScheme: "light" });
    await expect(html).not.toHaveClass(/\bdark\b/);
  });

  test("keyboard focus is visible", async ({ page }) => {
    const { url } = stack();
    await page.goto(`${url}/rebuilds`);
    for (let i = 0; i < 4; i++) {
      await page.keyboard.press("Tab");
      const outline = await page.evaluate(() => {
        const el = document.activeElement as HTMLElement | null;
        if (!el || el === document.body) return null;
        const style = getComputedStyle(el);
        return { style: style.outlineStyle, width: parseFloat(style.outlineWidth) };
      });
      expect(outline).not.toBeNull();
      expect(outline!.style).not.toBe("none");
      expect(outline!.width).toBeGreaterThanOrEqual(2);
    }
  });

  test("times: 4-digit years everywhere; relative with the absolute on hover; schedules in UTC", async ({ page }) => {
    const { url, dataDir } = stack();
    const redis = stackRedis(dataDir);
    const startedAt = Date.now() - 90_000;
    await upsertRun(redis.main, redis.keys, {
      id: "e2e-times-a1",
      jobId: "e2e-times",
      attempt: 1,
      rebuild: "parcels",
      tenant: null,
      createdAt: startedAt,
      startedAt,
      status: "running",
    });
    await redis.close();
    await page.goto(`${url}/runs`);
    const started = page.getByRole("table", { name: "Runs" }).locator("time").first();
    await expect(started).toHaveText(/ago$|^just now$/);
    await expect(started).toHaveAttribute("title", /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC([+-]\d{2}:\d{2})?$/);
    await page.goto(`${url}/rebuilds`);
    const next = page.locator('tr[data-rebuild="parcels"] [data-field="next-run"] time');
    await expect(next).toHaveText(/^next|^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC$/);
    const text = await page.locator("main").innerText();
    expect(text).not.toMatch(/\b\d{1,2}\/\d{1,2}\/\d{2}\b/); // no 12/1/26
  });
});

test("a login link pasted into a tab already on /login logs in (hashchange)", async ({ page }) => {
  const { url, tokens } = stack();
  await page.goto(`${url}/login`);
  await expect(page.getByLabel("Token")).toBeVisible();
  // "Already on /login": the page is hydrated and listening. A fragment set during hydration can
  // be dropped by the router's first history update (CI on 6271cbb: the page stayed on /login).
  await expect(page.locator('form[data-listening="true"]')).toBeAttached();
  await page.evaluate((token) => {
    window.location.hash = `token=${token}`;
  }, tokens.operator);
  await expect(page).toHaveURL(/\/claims$/);
  await expect(page.locator('[data-field="identity"]')).toHaveText("alice (operator)");
});
