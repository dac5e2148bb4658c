import { expect, test } from "@playwright/test";
import { stack } from "./support/stack";

test("log in as operator and out again; as viewer the operator controls are absent", async ({ page }, testInfo) => {
  const { url, tokens } = stack();
  await page.goto(`${url}/claims`);
  await expect(page).toHaveURL(/\/login$/);
  await page.getByLabel("Token").fill("not-a-valid-token-at-all");
  await page.getByRole("button", { name: "Log in" }).click();
  await expect(page.getByRole("alert").filter({ hasText: "Unknown token." })).toBeVisible();

  await page.getByLabel("Token").fill(tokens.operator);
  await page.getByRole("button", { name: "Log in" }).click();
  await expect(page).toHaveURL(/\/claims$/);
  await expect(page.locator('[data-field="identity"]')).toHaveText("alice (operator)");
  await page.goto(`${url}/rebuilds`);
  await expect(page.getByRole("button", { name: "Rebuild now: slow-archive" })).toBeVisible();
  await page.screenshot({ path: testInfo.outputPath("operator.png"), fullPage: true });
  await page.getByRole("button", { name: "Log out" }).click();
  await expect(page).toHaveURL(/\/login$/);
  await page.goto(`${url}/claims`);
  await expect(page).toHaveURL(/\/login$/);

  await page.getByLabel("Token").fill(tokens.viewer);
  await page.getByRole("button", { name: "Log in" }).click();
  await expect(page.locator('[data-field="identity"]')).toHaveText("victor (viewer)");
  await page.goto(`${url}/rebuilds`);
  await expect(page.getByRole("table", { name: "Rebuilds" })).toContainText("slow-archive");
  await expect(page.getByRole("button", { name: /Rebuild now/ })).toHaveCount(0);
  await page.goto(`${url}/claims`);
  await expect(page.getByRole("button", { name: "Force release" })).toHaveCount(0);
  await page.screenshot({ path: testInfo.outputPath("viewer.png"), fullPage: true });
  await page.getByRole("button", { name: "Log out" }).click();
  await expect(page).toHaveURL(/\/login$/);
});

test("the login link printed by npm start (token in the fragment) logs in", async ({ page }) => {
  const { url, tokens } = stack();
  await page.goto(`${url}/login#token=${tokens.operator}`);
  await expect(page).toHaveURL(/\/claims$/);
  await expect(page.locator('[data-field="identity"]')).toHaveText("alice (operator)");
});
