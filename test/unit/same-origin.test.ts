/** The CSRF check for cookie-carried mutations, with and without a configured public origin. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { isSameOrigin } from "../../lib/auth/guard";

const post = (headers: Record<string, string>) =>
  new Request("http://127.0.0.1:3000/api/rebuilds/tiles/runs", { method: "POST", headers });

test("Origin must name the Host the request reached", () => {
  assert.equal(isSameOrigin(post({ host: "127.0.0.1:3000", origin: "http://127.0.0.1:3000" })), true);
  assert.equal(isSameOrigin(post({ host: "127.0.0.1:3000", origin: "http://evil.example" })), false);
  assert.equal(isSameOrigin(post({ host: "127.0.0.1:3000", origin: "null" })), false);
  assert.equal(isSameOrigin(post({ host: "127.0.0.1:3000" })), false, "no Origin, no Sec-Fetch-Site");
  assert.equal(isSameOrigin(post({ host: "127.0.0.1:3000", "sec-fetch-site": "same-origin" })), true);
  assert.equal(isSameOrigin(post({ host: "127.0.0.1:3000", "sec-fetch-site": "cross-site" })), false);
});

test("behind a proxy that rewrites Host, the configured public origin is accepted, and only it", () => {
  const publicOrigin = "https://claims.example.com";
  const proxied = { host: "127.0.0.1:3000" };
  assert.equal(isSameOrigin(post({ ...proxied, origin: publicOrigin })), false, "refused without the setting");
  assert.equal(isSameOrigin(post({ ...proxied, origin: publicOrigin }), publicOrigin), true);
  assert.equal(isSameOrigin(post({ ...proxied, origin: "http://claims.example.com" }), publicOrigin), false, "scheme");
  assert.equal(isSameOrigin(post({ ...proxied, origin: "https://claims.example.com:8443" }), publicOrigin), false);
  assert.equal(isSameOrigin(post({ ...proxied, origin: "https://evil.example" }), publicOrigin), false);
});
