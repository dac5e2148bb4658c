import type { ApiClaim, TrailEntry } from "../api/claims";
import { formatDurationMs } from "./format";

/**
 * What the page says after a force release: a fixed text, or — for a release that went through —
 * one that follows the claim (helper-136: "free at the latest in 24 s" stayed up, unchanged,
 * after the claim was taken again): counting down while the released holder still has it, "free"
 * once it is gone, and who holds it now once another grant took it.
 */
export type ReleaseNotice =
  | { text: string }
  | {
      released: {
        name: string;
        token: string;
        /** The released claim's fence: which ended entry (lib/claims/trail) is its end. */
        fence?: number | null;
        holder: string;
        freeBy: number;
        already: boolean;
      };
    };

/** A released claim's end, when known: its holder stopped, or its release window ran out unanswered. */
type EndOf = Pick<TrailEntry, "name" | "fence" | "kind">;

/** How long after `freeBy` (the page's estimate of the window's end) a claim gone counts as run out. */
const WINDOW_SLACK_MS = 1_500;

export function noticeText(
  notice: ReleaseNotice,
  claims: readonly Pick<ApiClaim, "name" | "token" | "fence" | "holder">[],
  now: number,
  ended: readonly EndOf[] = [],
): string {
  if ("text" in notice) return notice.text;
  const { name, token, fence, holder, freeBy, already } = notice.released;
  const held = claims.find((c) => c.name === name);
  const released = already ? `${name} was already force-released` : `Released ${name}`;
  if (held && held.token === token) {
    const left = freeBy - now;
    if (left > 0)
      return `${released}: ${holder} is told to stop. The claim is free as soon as it has stopped, at the latest in ${formatDurationMs(left)}.`;
  }
  // Gone (or taken again): did the holder say it stopped, or did the window run out without it?
  // The claim's end in the ended list says (`stopped` or `expired`); until that is read, a claim
  // gone before its window's end was let go by its holder, one gone at the end ran out.
  const end = ended.find((e) => e.name === name && fence != null && e.fence === fence && e.kind !== "force-released");
  const ranOut = end ? end.kind === "expired" : now >= freeBy - WINDOW_SLACK_MS;
  const how = ranOut
    ? `the release window ran out without ${holder} answering (it may be frozen and come back; it is told to stop when it does)`
    : `${holder} has stopped`;
  if (held && held.token !== token)
    return `${released}: ${how}, and the claim has been taken again by ${held.holder.workerId ?? "another holder"} (fence ${held.fence}).`;
  if (!held) return `${released}: ${how}; the claim is free.`;
  return `${released}: ${how}; the claim is free now.`;
}

/** A claim whose force release waits for its holder to stop, in one line (the rebuild pages). */
export function releasingText(claim: Pick<ApiClaim, "revoked" | "pttlMs">): string | null {
  if (!claim.revoked) return null;
  return `Releasing: force-released by ${claim.revoked.by ?? "an operator"}; waiting for the holder to stop; free in at most ${formatDurationMs(Math.max(0, claim.pttlMs))}`;
}
