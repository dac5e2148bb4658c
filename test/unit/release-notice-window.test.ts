/**
 * After a force release whose holder never answered, the notice says the window ran out (helper-168:
 * it said "<worker> has stopped; the claim is free" of a holder that may be frozen and come back).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { noticeText, type ReleaseNotice } from "../../lib/ui/release-notice";

const notice: ReleaseNotice = {
  released: { name: "output:/srv/a", token: "t1", fence: 7, holder: "vm-1", freeBy: 30_000, already: false },
};
const entry = (kind: "stopped" | "expired" | "force-released", fence = 7) => ({ name: "output:/srv/a", fence, kind });
const taken = [{ name: "output:/srv/a", token: "t2", fence: 8, holder: { workerId: "vm-2" } as never }];

test("gone when its window ran out, its end not read yet: the window ran out without the holder answering", () => {
  const text = noticeText(notice, [], 30_800);
  assert.match(text, /the release window ran out without vm-1 answering \(it may be frozen and come back/);
  assert.doesNotMatch(text, /has stopped/);
});

test("the ended list decides: expired is the window running out, stopped is the holder's answer", () => {
  assert.match(noticeText(notice, [], 31_000, [entry("force-released"), entry("expired")]), /window ran out/);
  assert.match(
    noticeText(notice, taken, 31_000, [entry("expired")]),
    /window ran out without vm-1 answering .*taken again by vm-2/,
  );
  assert.equal(
    noticeText(notice, [], 31_000, [entry("stopped")]),
    "Released output:/srv/a: vm-1 has stopped; the claim is free.",
  );
  // Another claim's end (an earlier fence) says nothing about this one.
  assert.match(noticeText(notice, [], 12_000, [entry("expired", 6)]), /vm-1 has stopped/);
});
