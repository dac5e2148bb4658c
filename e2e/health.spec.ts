import { expect, test } from "@playwright/test";
import { embeddedRedisPid, stack, operatorHeaders } from "./support/stack";

test.describe.configure({ mode: "serial" });
// These specs act as the operator through a Bearer header (the login flow has its own spec).
test.use({ extraHTTPHeaders: operatorHeaders() });

test("the home page on the real stack shows the shell and a green health banner", async ({ page }, testInfo) => {
  const { url } = stack();
  await page.goto(url);
  await expect(page).toHaveURL(/\/claims$/);
  await expect(page.getByRole("link", { name: "claimwatch" })).toBeVisible();
  const nav = page.getByRole("navigation", { name: "Main" });
  for (const section of ["Claims", "Rebuilds", "Runs", "Workers", "Audit"]) {
    await expect(nav.getByRole("link", { name: section })).toBeVisible();
  }
  const banner = page.getByRole("status", { name: "System health" });
  await expect(banner).toHaveAttribute("data-health", "ok");
  await expect(banner).toContainText("noeviction");
  await page.screenshot({ path: testInfo.outputPath("home.png"), fullPage: true });

  await nav.getByRole("link", { name: "Runs" }).click();
  await expect(page.getByRole("heading", { level: 1, name: "Runs" })).toBeVisible();
  await expect(nav.getByRole("link", { name: "Runs" })).toHaveAttribute("aria-current", "page");
});

test("stopping the Redis turns the banner red and /api/health 503; it recovers after", async ({
  page,
  request,
}, testInfo) => {
  const { url, dataDir } = stack();
  const redisPid = embeddedRedisPid(dataDir);
  await page.goto(`${url}/claims`);
  const banner = page.getByRole("status", { name: "System health" });
  await expect(banner).toHaveAttribute("data-health", "ok");

  process.kill(redisPid, "SIGSTOP");
  try {
    const response = await request.get(`${url}/api/health`, { timeout: 10_000 });
    expect(response.status()).toBe(503);
    const body = (await response.json()) as { ok: boolean; redis: { ok: boolean } };
    expect(body.ok).toBe(false);
    expect(body.redis.ok).toBe(false);

    // The open page notices by itself (polling), without a reload.
    await expect(banner).toHaveAttribute("data-health", "problem");
    await expect(banner).toContainText("Redis is unreachable");
    // Connected to the server is not live while its Redis does not answer: the header says so.
    const live = page.getByRole("status", { name: "Live updates" });
    await expect(live).not.toHaveAttribute("data-live", "live");
    await expect(live).toContainText("Not live");
    await page.screenshot({ path: testInfo.outputPath("redis-down.png"), fullPage: true });
    // A page opened now says it could not read its list, never an empty one (helper-136: "no
    // claims", "no workers" and "could not read them" looked alike).
    for (const [path, field, what] of [
      ["/claims", "claims-reading", "the claims"],
      ["/workers", "workers-reading", "the workers"],
    ] as const) {
      const fresh = await page.context().newPage();
      try {
        await fresh.goto(`${url}${path}`, { timeout: 30_000 });
        await expect(fresh.locator(`[data-field="${field}"]`)).toContainText(`Could not read ${what}:`);
        await expect(fresh.locator("tr[data-claim], tr[data-worker]")).toHaveCount(0);
      } finally {
        await fresh.close();
      }
    }
    // Logging in cannot work now: the form says why (helper's finding: "Login failed (503)" alone).
    const login = await page.context().browser()!.newPage();
    try {
      await login.goto(`${url}/login`, { timeout: 30_000 });
      await expect(login.locator("form[data-listening]")).toBeAttached();
      await login.getByLabel("Token").fill("any-token-while-redis-is-down");
      await login.getByRole("button", { name: "Log in" }).click();
      await expect(login.locator("form p[role=alert]")).toHaveText(/^Login failed \(503\): Redis .+\.$/, {
        timeout: 30_000,
      });
    } finally {
      await login.close();
    }
  } finally {
    process.kill(redisPid, "SIGCONT");
  }
  // Polled as "state: text" so a failure says which problem the banner still shows, and what the
  // server says now (a stuck page and a stuck server are different bugs).
  await expect
    .poll(
      async () => {
        const now = await request.get(`${url}/api/health`, { timeout: 10_000 }).catch((e: Error) => e);
        const server = now instanceof Error ? now.message : `${now.status()} ${await now.text()}`;
        return `${await banner.getAttribute("data-health")}: ${await banner.innerText()} | server: ${server}`;
      },
      { timeout: 15_000 },
    )
    .toMatch(/^ok: /);
});
