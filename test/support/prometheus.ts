/**
 * The real Prometheus and Alertmanager (Debian packages `prometheus`, `prometheus-alertmanager`),
 * each on a free loopback port in a temporary directory, stopped by PID in `after`.
 */
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after } from "node:test";
import { freePort } from "../../lib/redis/embedded";
import { waitUntilGone } from "./processes";

export interface RunningService {
  url: string;
  pid: number;
  output(): string;
  stop(): Promise<void>;
}

const started = new Set<RunningService>();
after(async () => {
  await Promise.all([...started].map((service) => service.stop()));
});

async function startService(
  binary: string,
  args: (dir: string, port: number) => string[],
  files: Record<string, string>,
  readyPath: string,
): Promise<RunningService> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `claimwatch-${path.basename(binary)}-`));
  for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), text);
  const port = await freePort();
  const child: ChildProcess = spawn(binary, args(dir, port), { cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  const collect = (chunk: Buffer) => (output = (output + chunk.toString()).slice(-20_000));
  child.stdout!.on("data", collect);
  child.stderr!.on("data", collect);
  const url = `http://127.0.0.1:${port}`;
  const service: RunningService = {
    url,
    pid: child.pid!,
    output: () => output,
    async stop() {
      if (!started.delete(service)) return;
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      if ((await waitUntilGone([child.pid!], 10_000)).length > 0) child.kill("SIGKILL");
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  started.add(service);
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${binary} exited (${child.exitCode}):\n${output}`);
    const ok = await fetch(`${url}${readyPath}`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return service;
    if (Date.now() > deadline) throw new Error(`${binary} not ready within 60 s:\n${output}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

export function startAlertmanager(): Promise<RunningService> {
  const config = [
    "route:",
    "  receiver: blackhole",
    "  group_wait: 1s",
    "  group_interval: 1s",
    "receivers:",
    "  - name: blackhole",
    "",
  ].join("\n");
  return startService(
    "prometheus-alertmanager",
    (dir, port) => [
      `--config.file=${path.join(dir, "alertmanager.yml")}`,
      `--storage.path=${path.join(dir, "data")}`,
      `--web.listen-address=127.0.0.1:${port}`,
      "--cluster.listen-address=",
    ],
    { "alertmanager.yml": config },
    "/-/ready",
  );
}

/** Prometheus scraping `target` (`http://host:port`) at `metricsPath` every second with a bearer token. */
export function startPrometheus(target: string, token: string, metricsPath = "/metrics"): Promise<RunningService> {
  const { host } = new URL(target);
  const config = [
    "global:",
    "  scrape_interval: 1s",
    "  scrape_timeout: 1s",
    "scrape_configs:",
    "  - job_name: claimwatch",
    `    metrics_path: ${metricsPath}`,
    "    authorization:",
    "      type: Bearer",
    "      credentials_file: token",
    "    static_configs:",
    `      - targets: ["${host}"]`,
    "",
  ].join("\n");
  return startService(
    "prometheus",
    (dir, port) => [
      `--config.file=${path.join(dir, "prometheus.yml")}`,
      `--storage.tsdb.path=${path.join(dir, "data")}`,
      `--web.listen-address=127.0.0.1:${port}`,
    ],
    { "prometheus.yml": config, token },
    "/-/ready",
  );
}

/** An instant PromQL query through Prometheus' HTTP API: the vector's samples. */
export async function promQuery(
  prometheus: RunningService,
  query: string,
): Promise<{ metric: Record<string, string>; value: [number, string] }[]> {
  const response = await fetch(`${prometheus.url}/api/v1/query?query=${encodeURIComponent(query)}`);
  const body = (await response.json()) as {
    status: string;
    data?: { result: { metric: Record<string, string>; value: [number, string] }[] };
    error?: string;
  };
  if (body.status !== "success") throw new Error(`PromQL ${query}: ${body.error ?? response.status}`);
  return body.data!.result;
}

export interface AlertmanagerAlert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  startsAt: string;
  endsAt: string;
  status: { state: string };
}

/** The alerts Alertmanager holds as active now. */
export async function activeAlerts(alertmanager: RunningService): Promise<AlertmanagerAlert[]> {
  const response = await fetch(`${alertmanager.url}/api/v2/alerts?active=true&silenced=false&inhibited=false`);
  return ((await response.json()) as AlertmanagerAlert[]).filter((a) => a.status.state === "active");
}
