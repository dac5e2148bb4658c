/**
 * Searching a list by name: typing in the Rebuilds page's search box filters the rows (after the
 * debounce, from the API), the URL keeps the search so a link opens the same rows, and clearing
 * it brings every row back. Runs on the shipped definitions (parcels, incidents/acme,
 * incidents/globex, slow-archive).
 */
import { expect, test } from "@playwright/test";
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
  await page.goto(`${url}/rebuilds?q=incidents`);
  await expect(page.getByTestId("link-problem")).toHaveCount(0);
});
