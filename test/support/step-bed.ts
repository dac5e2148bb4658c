/**
 * A step containment test file's bed: a directory of its own (`<tmp>/<prefix>…`) for its steps'
 * output, and after the file's tests every process still carrying a marker the file issued is
 * SIGKILLed (test/support/markers.ts) and the directory removed. `context` gives each step a
 * fresh work directory in it (test/support/step-context.ts for the rest).
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after } from "node:test";
import type { StepContext } from "../../lib/rebuilds/steps/context";
import { killMarkedProcesses } from "./markers";
import { stepContext } from "./step-context";

export function stepTestBed(prefix: string): { dir: string; context(more?: Partial<StepContext>): StepContext } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  after(() => {
    killMarkedProcesses();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return {
    dir,
    context: (more = {}) => stepContext(dir, { workDir: fs.mkdtempSync(path.join(dir, "work-")), ...more }),
  };
}
