import { listLiveWorkersAt, type SilentWorker, type WorkerStatus } from "../workers/heartbeat";
import type { WebContext } from "../web/context";

/** Live workers, and those that stopped beating in the last hour without shutting down (`silent`). */
export async function getWorkers(
  context: WebContext,
): Promise<{ workers: WorkerStatus[]; silent: SilentWorker[]; serverTime: number }> {
  const { connections } = context;
  return listLiveWorkersAt(connections.main, connections.keys);
}
