import { expect, test } from "@playwright/test";
import { operatorHeaders, stack } from "./support/stack";

test.use({ extraHTTPHeaders: operatorHeaders() });

test("the Alerts page is in the nav and linked from the banner; it shows who evaluates and what fires", async ({
  page,
}) => {
  const { url } = stack();
  await page.goto(`${url}/claims`);
  const banner = page.getByRole("status", { name: "System health" });
  await expect(banner.getByRole("link", { name: "Alerts" })).toHaveAttribute("href", "/alerts");
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Alerts" }).click();
  await expect(page.getByRole("heading", { level: 1, name: "Alerts" })).toBeVisible();
  // The e2e definitions keep the shipped `alerts:` section (all rules, no receivers).
  await expect(page.getByText(/^Evaluated by .+, fence \d+\.$/)).toBeVisible();
  await expect(page.getByRole("heading", { level: 2, name: /^Firing \(\d+\)$/ })).toBeVisible();
  await expect(page.getByRole("heading", { level: 2, name: "Recent transitions" })).toBeVisible();
});
