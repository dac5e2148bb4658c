/**
 * `npm start` builds the dashboard again when one of its sources changed after its build (an
 * upgrade in place: `git pull`, `npm ci`): `changedSinceBuild` in lib/launcher/children.ts, on a
 * real directory with file times set as a checkout after a build would leave them.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { changedSinceBuild } from "../../lib/launcher/children";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-dashboard-build-"));
after(() => fs.rmSync(root, { recursive: true, force: true }));

const at = (file: string, secondsAgo: number) => {
  const when = new Date(Date.now() - secondsAgo * 1000);
  fs.utimesSync(path.join(root, file), when, when);
};

test("a build newer than every source is current; a source changed, added or removed after it is not", () => {
  for (const dir of ["app/runs", "lib/api", ".next", "node_modules/x"])
    fs.mkdirSync(path.join(root, dir), { recursive: true });
  for (const file of ["app/runs/page.tsx", "lib/api/runs.ts", "package-lock.json", "node_modules/x/index.js"])
    fs.writeFileSync(path.join(root, file), "x");
  for (const entry of [
    "app/runs/page.tsx",
    "lib/api/runs.ts",
    "package-lock.json",
    "app/runs",
    "app",
    "lib/api",
    "lib",
  ])
    at(entry, 600);
  fs.writeFileSync(path.join(root, ".next/BUILD_ID"), "build-1");
  at(".next/BUILD_ID", 300);
  at("node_modules/x/index.js", 10); // not a source: node_modules follows package-lock.json
  assert.equal(changedSinceBuild(root), null);

  at("lib/api/runs.ts", 10); // a checkout rewrote it
  assert.equal(changedSinceBuild(root), path.join("lib", "api", "runs.ts"));
  at("lib/api/runs.ts", 600);

  at("package-lock.json", 10); // other dependencies
  assert.equal(changedSinceBuild(root), "package-lock.json");
  at("package-lock.json", 600);

  fs.rmSync(path.join(root, "app/runs/page.tsx")); // removed: its directory changed
  assert.equal(changedSinceBuild(root), path.join("app", "runs"));
  fs.writeFileSync(path.join(root, "app/runs/page.tsx"), "x");
  at("app/runs/page.tsx", 600);
  at("app/runs", 600);
  assert.equal(changedSinceBuild(root), null);
});
