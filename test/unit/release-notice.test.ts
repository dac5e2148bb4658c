/** The force-release notice follows the claim (helper-136: it stayed up unchanged after the claim was taken again). */
import assert from "node:assert/strict";
import { test } from "node:test";
import { noticeText, type ReleaseNotice } from "../../lib/ui/release-notice";

const released: ReleaseNotice = {
  released: { name: "output:/srv/a", token: "t1", holder: "vm-1", freeBy: 30_000, already: false },
};
const claim = (token: string, workerId: string, fence: number) => ({
  name: "output:/srv/a",
  token,
  fence,
  holder: { workerId } as never,
});

test("counts down while the released holder has the claim, says free once it is gone, names the next holder", () => {
  assert.match(noticeText(released, [claim("t1", "vm-1", 7)], 6_000), /at the latest in 24 s\.$/);
  assert.match(noticeText(released, [claim("t1", "vm-1", 7)], 20_000), /at the latest in 10 s\.$/);
  assert.match(noticeText(released, [claim("t1", "vm-1", 7)], 31_000), /release window ran out/);
  assert.equal(noticeText(released, [], 8_000), "Released output:/srv/a: vm-1 has stopped; the claim is free.");
  assert.equal(
    noticeText(released, [claim("t2", "vm-2", 8)], 8_000),
    "Released output:/srv/a: vm-1 has stopped, and the claim has been taken again by vm-2 (fence 8).",
  );
  assert.equal(noticeText({ text: "Not released." }, [], 0), "Not released.");
});
