/**
 * A Redis client whose reply to one script call is lost: through a TCP proxy that, the first time
 * a script call naming `marker` passes, lets it reach Redis but drops its reply, runs `meanwhile`,
 * then cuts the connection — ioredis resends the command on a new one (as after a network blip).
 */
import net from "node:net";
import type { Redis } from "ioredis";
import { closeRedis, createRedis } from "../../lib/redis/client";

export interface ReplyLosingClient {
  main: Redis;
  /** Whether the marked call passed (its reply was dropped). */
  cut: () => boolean;
  close: () => Promise<void>;
}

export async function replyLosingClient(
  redisPort: number,
  marker: string,
  meanwhile: () => Promise<unknown> = async () => {},
): Promise<ReplyLosingClient> {
  let cut = false;
  const sockets = new Set<net.Socket>();
  const proxy = net.createServer((client) => {
    const server = net.connect(redisPort, "127.0.0.1");
    sockets.add(client).add(server);
    let dropReplies = false;
    client.on("data", (chunk) => {
      server.write(chunk);
      // A script call naming the marker (not the connection's handshake).
      if (!cut && chunk.includes(marker) && /evalsha|eval/i.test(chunk.toString("latin1"))) {
        cut = true;
        dropReplies = true;
        setTimeout(() => {
          void meanwhile().finally(() => {
            client.destroy();
            server.destroy();
          });
        }, 200);
      }
    });
    server.on("data", (chunk) => {
      if (!dropReplies) client.write(chunk);
    });
    for (const socket of [client, server]) {
      socket.on("error", () => {});
      socket.on("close", () => {
        sockets.delete(socket);
        (socket === client ? server : client).destroy();
      });
    }
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  const main = createRedis(`redis://127.0.0.1:${(proxy.address() as net.AddressInfo).port}`, "worker", "reply-losing");
  return {
    main,
    cut: () => cut,
    close: async () => {
      await closeRedis(main);
      for (const socket of sockets) socket.destroy();
      proxy.close();
    },
  };
}
