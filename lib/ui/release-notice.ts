import type { ApiClaim } from "../api/claims";
import { formatDurationMs } from "./format";

/**
 * What the page says after a force release: a fixed text, or — for a release that went through —
 * one that follows the claim (helper-136: "free at the latest in 24 s" stayed up, unchanged,
 * after the claim was taken again): counting down while the released holder still has it, "free"
 * once it is gone, and who holds it now once another grant took it.
 */
export type ReleaseNotice =
  { text: string } | { released: { name: string; token: string; holder: string; freeBy: number; already: boolean } };

export function noticeText(
  notice: ReleaseNotice,
  claims: readonly Pick<ApiClaim, "name" | "token" | "fence" | "holder">[],
  now: number,
): string {
  if ("text" in notice) return notice.text;
  const { name, token, holder, freeBy, already } = notice.released;
  const held = claims.find((c) => c.name === name);
  const released = already ? `${name} was already force-released` : `Released ${name}`;
  if (held && held.token !== token)
    return `${released}: ${holder} has stopped, and the claim has been taken again by ${held.holder.workerId ?? "another holder"} (fence ${held.fence}).`;
  if (!held) return `${released}: ${holder} has stopped; the claim is free.`;
  const left = freeBy - now;
  return left > 0
    ? `${released}: ${holder} is told to stop. The claim is free as soon as it has stopped, at the latest in ${formatDurationMs(left)}.`
    : `${released}: ${holder} has not said it stopped; the claim is free now (its release window ran out).`;
}

/** A claim whose force release waits for its holder to stop, in one line (the rebuild pages). */
export function releasingText(claim: Pick<ApiClaim, "revoked" | "pttlMs">): string | null {
  if (!claim.revoked) return null;
  return `Releasing: force-released by ${claim.revoked.by ?? "an operator"}; waiting for the holder to stop; free in at most ${formatDurationMs(Math.max(0, claim.pttlMs))}`;
}
