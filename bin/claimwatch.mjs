#!/usr/bin/env node
// `claimwatch` (package.json "bin"; `npx claimwatch …` in this repository): loads tsx in this
// process, then runs the CLI's TypeScript. See cli/index.ts and README, "From a shell".
import { register } from "tsx/esm/api";

register();
await import("../cli/index.ts");
