import { listLiveWorkersAt, type WorkerStatus } from "../workers/heartbeat";
import type { WebContext } from "../web/context";

export async function getWorkers(context: WebContext): Promise<{ workers: WorkerStatus[]; serverTime: number }> {
  const { connections } = context;
  return listLiveWorkersAt(connections.main, connections.keys);
}
