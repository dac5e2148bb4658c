#!/usr/bin/env node
// `claimwatch` (package.json "bin"; `npx claimwatch …` in this repository): runs the CLI from its
// bundle (lib/launcher/bundle.mjs: built once, rebuilt when a source changes; half the start-up
// of loading each module through tsx), or, when it cannot be built, its TypeScript through tsx.
// See cli/index.ts and README, "From a shell".
import { pathToFileURL } from "node:url";
import { bundled } from "../lib/launcher/bundle.mjs";

// A failed build is said only where it matters: the CLI still runs, through tsx.
const bundle = await bundled("cli/index.ts", (line) => {
  if (!line.includes(": built in ")) process.stderr.write(`claimwatch: ${line}\n`);
});
if (bundle) {
  process.setSourceMapsEnabled(true);
  await import(pathToFileURL(bundle).href);
} else {
  const { register } = await import("tsx/esm/api");
  register();
  await import("../cli/index.ts");
}
