/**
 * Searching a list by name: typing in the Rebuilds page's search box filters the rows (after the
 * debounce, from the API), the URL keeps the search so a link opens the same rows, and clearing
 * it brings every row back. Runs on the shipped definitions (parcels, incidents/acme,
 * incidents/globex, slow-archive).
 */
import { expect, test } from "@playwright/test";
import { appendAudit } from "../lib/audit/append";
import { seedRunInto } from "../test/support/runs";
import { stackRedisForSpec } from "./support/live";
import { stack, operatorHeaders } from "./support/stack";

test.use({ extraHTTPHeaders: operatorHeaders() });

test("typing in the Rebuilds search box filters the rows and the URL keeps the search", async ({ page }) => {
  const { url } = stack();
  await page.goto(`${url}/rebuilds`);
  const rows = page.locator("tr[data-rebuild]");
  await expect(rows).toHaveCount(4);
  await expect(page.locator('[data-field="rebuilds-count"]')).toHaveText("1–4 of 4");

  const search = page.getByRole("searchbox", { name: "Rebuild or tenant name contains" });
  await search.fill("ACME");
  await expect(rows).toHaveCount(1);
  await expect(page.locator('tr[data-rebuild="incidents"][data-tenant="acme"]')).toBeVisible();
  await expect(page.locator('[data-field="rebuilds-count"]')).toHaveText("1–1 of 1 matching “ACME”");
  await expect(page).toHaveURL(/\/rebuilds\?q=ACME$/);

  // A link with the search opens the same rows, the box filled in.
  await page.goto(`${url}/rebuilds?q=incidents`);
  await expect(rows).toHaveCount(2);
  await expect(page.getByRole("searchbox", { name: "Rebuild or tenant name contains" })).toHaveValue("incidents");

  await page.getByRole("searchbox", { name: "Rebuild or tenant name contains" }).fill("no-such-rebuild");
  await expect(page.getByText("No rebuild or tenant name contains “no-such-rebuild”.")).toBeVisible();
  await expect(rows).toHaveCount(0);

  await page.getByRole("searchbox", { name: "Rebuild or tenant name contains" }).fill("");
  await expect(rows).toHaveCount(4);
  await expect(page).toHaveURL(/\/rebuilds$/);
});

test("typing in the Runs search box narrows the rebuilds the runs come from", async ({ page }) => {
  const { url } = stack();
  await page.goto(`${url}/runs`);
  const search = page.getByRole("searchbox", { name: "Rebuild name contains" });
  await search.fill("no-such-rebuild");
  await expect(page.locator('[data-field="runs-search"]')).toHaveText("No rebuild name contains “no-such-rebuild”.");
  await expect(page).toHaveURL(/\/runs\?q=no-such-rebuild$/);
  await search.fill("incid");
  await expect(page.locator('[data-field="runs-search"]')).toHaveText("Runs of 1 rebuild matching “incid”.");
  await expect(page.locator("tr[data-run]").filter({ hasNotText: "incidents" })).toHaveCount(0);
});

test("a link whose filter cannot be used says so above the list instead of listing everything silently", async ({
  page,
}) => {
  const { url } = stack();
  const long = "a".repeat(101);
  for (const path of [`/rebuilds?q=${long}`, `/claims?q=${long}`, `/runs?q=${long}`, "/runs?status=done"]) {
    await page.goto(`${url}${path}`);
    const problem = page.getByTestId("link-problem");
    await expect(problem, path).toBeVisible();
    await expect(problem, path).toContainText(path.includes("status") ? "status: must be one of" : "q: ");
    await expect(problem, path).toContainText("showing everything");
  }
  // A bad cursor or limit is named too, as the API names it (helper-117: the pages ignored them).
  for (const [path, text] of [
    ["/claims?cursor=a%20b", "cursor: not a claim name"],
    ["/claims?limit=-4", "limit: "],
    ["/rebuilds?cursor=xx", "cursor: must be a cursor from a previous page"],
    ["/rebuilds?limit=-4", "limit: "],
  ] as const) {
    await page.goto(`${url}${path}`);
    await expect(page.getByTestId("link-problem"), path).toContainText(text);
  }
  // A Runs link with a cursor cut short: named, the newest runs listed, the cursor out of the URL
  // (helper-152: the list read it again and showed nothing but its error).
  await page.goto(`${url}/runs?cursor=garbage`);
  await expect(page.getByTestId("link-problem")).toContainText("cursor: must be a cursor from a previous page");
  await expect(page).toHaveURL(/\/runs$/);
  await expect(page.locator("tr[data-run]").first().or(page.getByText("No runs match."))).toBeVisible();
  await page.waitForTimeout(1_500); // the list's first read from the browser
  await expect(page.getByText("Could not load runs")).toHaveCount(0);
  // With a filter beside it: the filter is kept, only the page is not used (helper-157).
  await page.goto(`${url}/runs?rebuild=incidents&cursor=garbage`);
  await expect(page.getByTestId("link-problem")).toContainText("This link's page was not used (cursor: ");
  await expect(page).toHaveURL(/\/runs\?rebuild=incidents$/);
  // The filter's own select (the duration trend below has one named Rebuild too, once it has data).
  await expect(
    page.getByRole("form", { name: "Filter runs" }).getByRole("combobox", { name: "Rebuild", exact: true }),
  ).toHaveValue("incidents");
  await page.goto(`${url}/rebuilds?q=incidents`);
  await expect(page.getByTestId("link-problem")).toHaveCount(0);
  await page.goto(`${url}/claims?q=incidents&limit=20`);
  await expect(page.getByTestId("link-problem")).toHaveCount(0);
});

const redis = stackRedisForSpec();

test("the Runs page a list was paged to is in the URL: a run opened from it, Back and a reload come back to it", async ({
  page,
}) => {
  const { url } = stack();
  // 30 skipped runs of incidents/globex, two days old (out of the charts' 24 h): older than any
  // other of its runs, so the oldest is on the second page.
  const startedAt = Date.now() - 2 * 86_400_000;
  const tx = redis.main.multi();
  for (let attempt = 1; attempt <= 30; attempt++) {
    seedRunInto(tx, redis.keys, {
      id: `e2e-paging-${attempt}-a1`,
      jobId: `e2e-paging-${attempt}`,
      attempt: 1,
      rebuild: "incidents",
      tenant: "globex",
      createdAt: startedAt,
      startedAt: startedAt + attempt * 1_000,
      finishedAt: startedAt + attempt * 1_000 + 500,
      durationMs: 500,
      status: "skipped",
    });
  }
  await tx.exec();
  await page.goto(`${url}/runs?rebuild=incidents&tenant=globex&status=skipped`);
  const rows = page.locator("tr[data-run]");
  const oldest = page.locator('tr[data-run="e2e-paging-1-a1"]');
  await expect(rows).toHaveCount(25);
  await expect(oldest).toHaveCount(0);
  await page.getByRole("button", { name: "Older" }).click();
  await expect(oldest).toHaveCount(1);
  await expect(page).toHaveURL(/[?&]cursor=/);
  const older = page.url();

  await page.getByRole("link", { name: "e2e-paging-1-a1", exact: true }).click();
  await expect(page).toHaveURL(/\/runs\/e2e-paging-1-a1$/);
  await page.goBack();
  await expect(page).toHaveURL(older);
  await expect(oldest).toHaveCount(1);
  await page.reload();
  await expect(oldest).toHaveCount(1);

  await page.goBack(); // from the older page to the newest
  await expect(page).not.toHaveURL(/cursor=/);
  await expect(rows).toHaveCount(25);
  await expect(oldest).toHaveCount(0);
  await page.goForward();
  await expect(oldest).toHaveCount(1);
});

test("the Audit log pages to older entries (Older, ?cursor=) and says when a link's entry cannot be used", async ({
  page,
}) => {
  const { url } = stack();
  // 110 entries after everything before: a page holds 100, so the first of them is on the next.
  await appendAudit(redis.main, redis.keys, {
    actor: "e2e-pager",
    action: "trigger",
    reason: "e2e oldest of 110",
    result: "refused",
    detail: {},
  });
  for (let i = 1; i < 110; i++)
    await appendAudit(redis.main, redis.keys, {
      actor: "e2e-pager",
      action: "trigger",
      reason: `e2e ${i}`,
      result: "refused",
      detail: {},
    });
  await page.goto(`${url}/audit`);
  const rows = page.getByRole("table", { name: "Audit log" }).locator("tbody tr");
  const oldest = page.getByRole("cell", { name: "e2e oldest of 110", exact: true });
  await expect(rows).toHaveCount(100);
  await expect(oldest).toHaveCount(0);
  await page.getByRole("link", { name: "Older" }).click();
  await expect(page).toHaveURL(/\/audit\?cursor=/);
  await expect(oldest).toHaveCount(1);
  await page.reload();
  await expect(oldest).toHaveCount(1);
  await page.goBack();
  await expect(rows).toHaveCount(100);
  await expect(oldest).toHaveCount(0);

  await page.goto(`${url}/audit?entry=bogus`);
  await expect(page.getByTestId("link-problem")).toContainText("entry: must be an audit entry id");
  await expect(rows).toHaveCount(100);
});

test("a run someone else closed says it ended unseen between when it was last seen and its close, not a false Finished time (helper-143)", async ({
  page,
}) => {
  const { url } = stack();
  const startedAt = Date.now() - 3 * 86_400_000;
  const tx = redis.main.multi();
  seedRunInto(tx, redis.keys, {
    id: "e2e-unseen-1-a1",
    jobId: "e2e-unseen-1",
    attempt: 1,
    rebuild: "incidents",
    tenant: "globex",
    createdAt: startedAt,
    startedAt,
    finishedAt: startedAt + 2_000, // its worker's last beat
    durationMs: 2_000,
    closedAt: startedAt + 11_000, // the next attempt closed it
    status: "aborted",
    reason: "its worker stopped beating",
  });
  await tx.exec();
  await page.goto(`${url}/runs/e2e-unseen-1-a1`);
  const ended = page.locator('[data-field="ended-unseen"]');
  await expect(ended).toContainText(/^unseen, after .+ \(last seen running\) and before .+ \(closed\)$/);
  await expect(page.getByText("Finished", { exact: true })).toHaveCount(0);
  await expect(page.locator('span[data-field="duration"]')).toContainText("≥ 2 s");
});
