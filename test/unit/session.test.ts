/** Signed session cookies: exactly one spelling of a signature is accepted. */
import assert from "node:assert/strict";
import crypto from "node:crypto";
import { test } from "node:test";
import type { Credential } from "../../lib/auth/credentials";
import { newSessionId, signSession, verifySession } from "../../lib/auth/session";

const secret = crypto.randomBytes(32);
const credential: Credential = { name: "ops", role: "operator", tokenId: "t1", digest: Buffer.alloc(32) };
const session = {
  name: "ops",
  role: "operator" as const,
  tokenId: "t1",
  sid: newSessionId(),
  expires: Date.now() + 60_000,
};
const BASE64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

test("a signed session verifies; any other character in its signature is refused", () => {
  const value = signSession(session, secret);
  assert.deepEqual(verifySession(value, secret, [credential]), session);
  const dot = value.indexOf(".");
  // Every position, including the last character, whose low bits the bytes do not use: a
  // decoder maps several spellings of it to the same bytes, the exact-text check does not.
  for (let i = dot + 1; i < value.length; i++) {
    for (const replacement of [
      BASE64URL[(BASE64URL.indexOf(value[i]!) + 1) % 64]!,
      BASE64URL[BASE64URL.indexOf(value[i]!) ^ 1]!,
    ]) {
      const tampered = value.slice(0, i) + replacement + value.slice(i + 1);
      assert.equal(verifySession(tampered, secret, [credential]), null, `position ${i}: ${replacement}`);
    }
  }
});

test("a changed payload, another secret, an expired session or a removed token is refused", () => {
  const value = signSession(session, secret);
  const forged = `${Buffer.from(JSON.stringify({ ...session, role: "operator", name: "x" })).toString("base64url")}${value.slice(value.indexOf("."))}`;
  assert.equal(verifySession(forged, secret, [credential]), null);
  assert.equal(verifySession(value, crypto.randomBytes(32), [credential]), null);
  assert.equal(verifySession(signSession({ ...session, expires: Date.now() - 1 }, secret), secret, [credential]), null);
  assert.equal(verifySession(value, secret, []), null);
  const { sid: _sid, ...withoutSid } = session;
  assert.equal(
    verifySession(signSession(withoutSid as typeof session, secret), secret, [credential]),
    null,
    "a cookie from before server-side logout (no session id) is refused",
  );
  for (const junk of [undefined, "", ".", "abc", `${value}x`, "x".repeat(3_000)]) {
    assert.equal(verifySession(junk, secret, [credential]), null, String(junk).slice(0, 20));
  }
});
