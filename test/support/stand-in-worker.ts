/**
 * The start of a stand-in worker (test/support/*-host.ts): the containment `mode` asks for and a
 * step warden with a silence limit of `silenceMs`, given 300 ms to start and read its first lines.
 */
import { detectContainment, type Containment } from "../../lib/rebuilds/steps/containment";
import { stepWarden } from "../../lib/rebuilds/steps/warden";

export async function startStandInWorker(mode: string | undefined, silenceMs: number): Promise<Containment> {
  const containment = detectContainment(mode);
  stepWarden.start(silenceMs);
  await new Promise((r) => setTimeout(r, 300)); // the warden has read its first lines
  return containment;
}
