/**
 * A local HTTP receiver for alert deliveries (Slack, webhooks): records every request, and
 * answers as told — 200, 500, or never (a hung receiver). Closed in `after`.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after } from "node:test";

export interface ReceivedRequest {
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

export type ReceiverMode = "ok" | "fail" | "hang";

export interface HttpReceiver {
  url: string;
  requests: ReceivedRequest[];
  /** Per path prefix; default "ok". */
  setMode(pathPrefix: string, mode: ReceiverMode): void;
  /** Requests held unanswered right now (a "hang" path's, until the sender gives up). */
  hanging(): number;
  waitFor(predicate: (requests: ReceivedRequest[]) => boolean, timeoutMs?: number, label?: string): Promise<void>;
  close(): Promise<void>;
}

const open = new Set<HttpReceiver>();
after(async () => {
  await Promise.all([...open].map((receiver) => receiver.close()));
});

export async function startHttpReceiver(): Promise<HttpReceiver> {
  const requests: ReceivedRequest[] = [];
  const modes = new Map<string, ReceiverMode>();
  const hung = new Set<http.ServerResponse>();
  const server = http.createServer((request, response) => {
    let body = "";
    request.on("data", (chunk: Buffer) => (body += chunk.toString()));
    request.on("end", () => {
      const path = request.url ?? "/";
      const mode = [...modes.entries()].find(([prefix]) => path.startsWith(prefix))?.[1] ?? "ok";
      requests.push({ path, headers: request.headers, body });
      if (mode === "hang") {
        hung.add(response);
        response.once("close", () => hung.delete(response));
        return;
      }
      response.writeHead(mode === "ok" ? 200 : 500, { "content-type": "text/plain" });
      response.end(mode === "ok" ? "ok" : "receiver says no");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const receiver: HttpReceiver = {
    url: `http://127.0.0.1:${port}`,
    requests,
    setMode: (prefix, mode) => modes.set(prefix, mode),
    hanging: () => hung.size,
    async waitFor(predicate, timeoutMs = 60_000, label = "the expected requests") {
      const deadline = Date.now() + timeoutMs;
      while (!predicate(requests)) {
        if (Date.now() > deadline) {
          throw new Error(
            `no ${label} within ${timeoutMs} ms; got ${JSON.stringify(
              requests.map((r) => [r.path, r.body.slice(0, 300)]),
              null,
              1,
            )}`,
          );
        }
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    async close() {
      open.delete(receiver);
      for (const response of [...hung]) response.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  open.add(receiver);
  return receiver;
}
