/**
 * The URL forms of REDIS_URL / CLAIMS_REDIS_URL reach the server as written: an ACL user with its
 * password (`redis://user:pass@…`), and TLS (`rediss://…`, certificate verified against
 * NODE_EXTRA_CA_CERTS). A real redis-server with a TLS port and an ACL user, a real worker
 * process that rebuilds through each form; `CLIENT LIST` shows which user and which port its
 * connections use. The user may touch only keys under claimwatch's prefix (`~{prefix}:*`). (Sentinel: test/integration/redis-failover.test.ts.)
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { closeRedis, createRedis } from "../../lib/redis/client";
import { freePort } from "../../lib/redis/embedded";
import { adminClient } from "../support/sentinel";
import { startTestRedis, type TestRedis } from "../support/redis";
import { createTestBed, type TestBed } from "../support/stack";

const USER = "claimwatch-app";
const PASSWORD = "app-pass-7f3c2a91";
const certDir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-tls-"));
const ca = path.join(certDir, "cert.pem");

let server: TestRedis;
let tlsPort: number;
let bed: TestBed;
before(async () => {
  // A self-signed certificate for 127.0.0.1: it is its own CA.
  execFileSync(
    "openssl",
    ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
      "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", path.join(certDir, "key.pem"), "-out", ca],
    { stdio: "ignore" },
  ); // prettier-ignore
  tlsPort = await freePort();
  server = await startTestRedis([
    "--tls-port", String(tlsPort),
    "--tls-cert-file", ca,
    "--tls-key-file", path.join(certDir, "key.pem"),
    "--tls-ca-cert-file", ca,
    "--tls-auth-clients", "no",
  ]); // prettier-ignore
  const admin = adminClient(server);
  try {
    await admin.call("ACL", "SETUSER", USER, "on", `>${PASSWORD}`, "~*", "&*", "+@all");
  } finally {
    admin.disconnect();
  }
  bed = await createTestBed(
    {
      tiles: {
        output: "out/url-forms",
        claim: { ttl: "4s", refreshEvery: "1s" },
        steps: [{ name: "write", run: ["sh", "-c", 'echo "$CLAIMWATCH_VERSION" > "$CLAIMWATCH_WORK/v"'] }],
      },
    },
    {},
    { redis: server, url: `redis://${USER}:${PASSWORD}@127.0.0.1:${server.port}` },
  );
  // The narrowest key pattern RELIABILITY.md promises is enough: every key under the prefix.
  const narrow = adminClient(server);
  try {
    await narrow.call("ACL", "SETUSER", USER, "resetkeys", `~${bed.keys.tag}:*`);
  } finally {
    narrow.disconnect();
  }
});
after(async () => {
  await bed?.close();
  fs.rmSync(certDir, { recursive: true, force: true });
});

/**
 * `CLIENT LIST` entries of the worker's connections: all but this process's own (the bed's
 * `test-*` clients and this admin connection). BullMQ names its duplicates itself.
 */
async function workerConnections(): Promise<Map<string, string>[]> {
  const admin = adminClient(server);
  try {
    const list = String(await admin.call("CLIENT", "LIST"));
    return list
      .split("\n")
      .filter((line) => line.trim() !== "" && !/ name=test-/.test(line) && !/ cmd=client\|list/.test(line))
      .map((line) => new Map(line.split(" ").map((field) => field.split("=", 2) as [string, string])));
  } finally {
    admin.disconnect();
  }
}

test("an ACL user in the URL: the worker's main, claims and BullMQ connections log in as that user", async () => {
  const worker = await bed.startWorker();
  try {
    await bed.trigger("tiles", { version: "acl-1" });
    await bed.waitForRun((run) => run.version === "acl-1" && run.status === "rebuilt", 60_000, "an ACL rebuild");
    const connections = await workerConnections();
    // main, claims, and BullMQ's blocking duplicate of main (flags=b, waiting in BZPOPMIN).
    assert.ok(connections.length >= 3, JSON.stringify(connections.map((c) => c.get("name"))));
    assert.ok(
      connections.some((c) => c.get("flags")?.includes("b")),
      "the blocking connection is among them",
    );
    for (const connection of connections) assert.equal(connection.get("user"), USER, connection.get("name"));
    assert.doesNotMatch(worker.output(), /NOPERM|permission|heartbeat failed|could not sync/i, worker.output());
  } finally {
    await worker.stop();
  }
  // The password is really sent: a wrong one is refused, not ignored.
  const wrong = createRedis(`redis://${USER}:not-the-password@127.0.0.1:${server.port}`, "probe");
  try {
    await assert.rejects(wrong.ping(), /WRONGPASS|invalid username-password/);
  } finally {
    await closeRedis(wrong);
  }
});

test("rediss:// with an ACL user: the worker talks TLS to the TLS port, the certificate verified", async () => {
  const url = `rediss://${USER}:${PASSWORD}@127.0.0.1:${tlsPort}`;
  const worker = await bed.startWorker({ REDIS_URL: url, NODE_EXTRA_CA_CERTS: ca });
  try {
    await bed.trigger("tiles", { version: "tls-1" });
    await bed.waitForRun((run) => run.version === "tls-1" && run.status === "rebuilt", 60_000, "a TLS rebuild");
    const connections = await workerConnections();
    assert.ok(connections.length >= 3);
    assert.ok(
      connections.some((c) => c.get("flags")?.includes("b")),
      "the blocking connection is among them",
    );
    for (const connection of connections) {
      assert.equal(connection.get("laddr"), `127.0.0.1:${tlsPort}`, connection.get("name"));
      assert.equal(connection.get("user"), USER);
    }
  } finally {
    await worker.stop();
  }
  // This process does not trust the certificate: verification is on, not skipped.
  const untrusted = createRedis(url, "probe");
  try {
    await assert.rejects(untrusted.ping());
  } finally {
    await closeRedis(untrusted);
  }
});
