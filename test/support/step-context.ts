/**
 * A step's context for tests and stand-in workers: step "job-a1" of rebuild "r", version v1,
 * fence 1, a signal nothing aborts, no log or progress, `dir` its work, output and base
 * directory — each of them replaced by `more`.
 */
import type { StepContext } from "../../lib/rebuilds/steps/context";

export function stepContext(dir: string, more: Partial<StepContext> = {}): StepContext {
  return {
    signal: new AbortController().signal,
    workDir: dir,
    outputDir: dir,
    baseDir: dir,
    version: "v1",
    tenant: undefined,
    rebuild: "r",
    runId: "job-a1",
    fence: 1,
    log: () => {},
    progress: () => {},
    ...more,
  };
}
