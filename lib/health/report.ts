import { getWebContext } from "../web/context";
import { checkHealth, unconfiguredHealth, type HealthReport } from "./health";
import { describeError } from "./redis-safety";

/** The web server's health report; never throws. */
export async function currentHealth(): Promise<HealthReport> {
  let context;
  try {
    context = getWebContext();
  } catch (error) {
    return unconfiguredHealth(describeError(error));
  }
  return checkHealth(context.probes);
}
