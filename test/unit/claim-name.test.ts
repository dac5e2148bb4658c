import assert from "node:assert/strict";
import { test } from "node:test";
import {
  assertValidClaimName,
  checkClaimName,
  claimName,
  InvalidClaimNameError,
  MAX_CLAIM_NAME_BYTES,
  tryClaimName,
} from "../../lib/claims/index";

test("a claim is named for the normalised output path, plus the tenant", () => {
  assert.equal(claimName("builds/incidents"), "output:builds/incidents");
  assert.equal(claimName("./builds//incidents/"), "output:builds/incidents");
  assert.equal(claimName("/srv/maps/./tiles/"), "output:/srv/maps/tiles");
  assert.equal(claimName("builds/incidents", "acme"), "tenant:acme:output:builds/incidents");
  assert.equal(claimName("builds/incidents", null), "output:builds/incidents");
  // Two tenants writing the same relative path do not contend; the same tenant does.
  assert.notEqual(claimName("out", "a"), claimName("out", "b"));
  assert.equal(claimName("out/", "a"), claimName("./out", "a"));
  // NFC: the same visible path in two Unicode forms is one claim.
  assert.equal(claimName("caf\u0065\u0301"), claimName("caf\u00e9"));
});

test("bad names are rejected with the reason", () => {
  const cases: Array<[string, string | undefined, RegExp]> = [
    ["", undefined, /empty/],
    ["   ", undefined, /empty/],
    [".", undefined, /names no directory/],
    ["/", undefined, /root directory/],
    ["builds/*", undefined, /glob character '\*'/],
    ["builds/a?b", undefined, /glob character '\?'/],
    ["builds/[ab]", undefined, /glob character '\['/],
    ["builds/a]", undefined, /glob character '\]'/],
    ["builds\\x", undefined, /glob character '\\'/],
    ["builds/\nx", undefined, /control character U\+000A at position 7/],
    ["builds/\u0000", undefined, /control character U\+0000/],
    ["builds/\u007f", undefined, /control character U\+007F/],
    ["builds/../etc", undefined, /'\.\.' segment/],
    ["..", undefined, /'\.\.' segment/],
    [" builds", undefined, /whitespace/],
    ["builds", "", /tenant "" must be/],
    ["builds", "a:b", /tenant "a:b" must be/],
    ["builds", "-x", /tenant "-x" must be/],
    ["x".repeat(MAX_CLAIM_NAME_BYTES), undefined, /is 519 bytes; the limit is 512/],
    ["é".repeat(253), undefined, /is 513 bytes/],
  ];
  for (const [output, tenant, reason] of cases) {
    const check = tryClaimName(output, tenant);
    assert.equal(check.ok, false, `${JSON.stringify(output)} must be rejected`);
    assert.match((check as { reason: string }).reason, reason);
    assert.throws(
      () => claimName(output, tenant),
      (error: unknown) =>
        error instanceof InvalidClaimNameError && reason.test(error.reason) && /invalid claim name/.test(error.message),
    );
  }
  // Exactly at the limit is fine.
  assert.equal(tryClaimName("x".repeat(MAX_CLAIM_NAME_BYTES - "output:".length)).ok, true);
});

test("names from requests must be canonical claim names", () => {
  assert.deepEqual(checkClaimName("output:builds/incidents"), { ok: true, name: "output:builds/incidents" });
  assert.deepEqual(checkClaimName("tenant:acme:output:x"), { ok: true, name: "tenant:acme:output:x" });
  assert.match((checkClaimName("output:builds//incidents/") as { reason: string }).reason, /not normalised/);
  assert.match((checkClaimName("builds/incidents") as { reason: string }).reason, /looks like output:<path>/);
  assert.match((checkClaimName("tenant:acme") as { reason: string }).reason, /tenant:<tenant>:output:<path>/);
  assert.match((checkClaimName("output:a/*") as { reason: string }).reason, /glob/);
  assert.match((checkClaimName("") as { reason: string }).reason, /empty/);
  assert.throws(() => assertValidClaimName("output:../x"), InvalidClaimNameError);
  assert.doesNotThrow(() => assertValidClaimName(claimName("a/b", "t1")));
});
