/**
 * Whether the dashboard can listen where it is told to, asked before anything starts (`npm
 * start`, `npm run web`): a HOST that is not an address of this machine, or a PORT another
 * process holds, is one line naming the variable — not a Next.js stack after the embedded Redis
 * and the worker have started. The probe listens and closes at once; the port is free again when
 * it answers (the web server binds it a moment later).
 */
import net from "node:net";
import { CONFIG_EXIT_CODE } from "../config";

export type ListenCheck =
  | { ok: true }
  /** `configError`: the value cannot work on this machine (exit 2); else the port is busy now (exit 1). */
  | { ok: false; variable: "HOST" | "PORT"; problem: string; configError: boolean };

export async function checkListen(host: string, port: number): Promise<ListenCheck> {
  const address = host.replace(/^\[(.*)\]$/, "$1"); // "[::1]" is how a URL writes ::1
  const error = await new Promise<NodeJS.ErrnoException | null>((resolve) => {
    const server = net.createServer();
    server.once("error", (failure: NodeJS.ErrnoException) => resolve(failure));
    server.listen({ host: address, port, exclusive: true }, () => server.close(() => resolve(null)));
  });
  if (!error) return { ok: true };
  const where = `${host} port ${port}`;
  switch (error.code) {
    case "EADDRINUSE":
      return {
        ok: false,
        variable: "PORT",
        problem: `${port} is already in use on ${host} by another process: stop it, or set PORT to a free port`,
        configError: false,
      };
    case "EACCES":
      return {
        ok: false,
        variable: "PORT",
        problem: `not allowed to listen on ${where} (ports below 1024 need privileges): set PORT to 1024 or above`,
        configError: true,
      };
    case "EADDRNOTAVAIL":
      return {
        ok: false,
        variable: "HOST",
        problem: `${host} is not an address of this machine: use one of its addresses, 127.0.0.1 or 0.0.0.0 (every address)`,
        configError: true,
      };
    case "ENOTFOUND":
    case "EAI_NONAME":
      return {
        ok: false,
        variable: "HOST",
        problem: `${host} does not resolve to an address (${error.code}): use an address of this machine, 127.0.0.1 or 0.0.0.0`,
        configError: true,
      };
    case "EAI_AGAIN":
      // DNS not answering yet (early in a boot): worth a supervisor's retry, not a config error.
      return {
        ok: false,
        variable: "HOST",
        problem: `${host} could not be resolved now (EAI_AGAIN: DNS did not answer); try again, or use an IP address`,
        configError: false,
      };
    default:
      return {
        ok: false,
        variable: "HOST",
        problem: `cannot listen on ${where}: ${error.code ?? error.message}`,
        configError: false,
      };
  }
}

/** `checkListen` for a launcher: one line and an exit (2 for a value that cannot work here, else 1) when it fails. */
export async function exitUnlessListenable(processName: string, host: string, port: number): Promise<void> {
  const check = await checkListen(host, port);
  if (check.ok) return;
  const kind = check.configError ? "configuration error: " : "";
  process.stderr.write(`${processName}: ${kind}${check.variable}: ${check.problem}\n`);
  process.exit(check.configError ? CONFIG_EXIT_CODE : 1);
}
