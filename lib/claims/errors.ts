/**
 * The claims module's two error classes. Expected outcomes (held, missing, not-owner,
 * superseded) are returned as values; these are thrown only where a value cannot be returned:
 * invalid input at the edge, and the loss of a claim while work is running under it.
 */

/**
 * Why a holder lost its claim while working:
 * - `superseded`: a refresh found another token in the claim (a takeover, or the claim expired
 *   and someone else acquired it);
 * - `force-released`: a refresh found that an operator force-released it (the holder must stop;
 *   nobody else gets the claim before its release acknowledges, or the release window ends);
 * - `expired`: a refresh found the claim gone (it expired);
 * - `deadline`: no refresh succeeded within the TTL on the local monotonic clock (Redis
 *   unreachable, or this process was paused), so another holder may already exist.
 */
export type ClaimLossCause = "superseded" | "force-released" | "expired" | "deadline";

/** The abort reason of a claim's AbortSignal; `withClaim` rethrows it when `fn` fails after loss. */
export class ClaimLostError extends Error {
  declare readonly cause: ClaimLossCause;

  constructor(
    readonly claimName: string,
    cause: ClaimLossCause,
    readonly fence: number,
    /** What else the holder knows of it (a deadline passed because the refreshes' own work failed). */
    readonly detail?: string,
    /**
     * A build the holder published in the claims Redis before it learnt of the loss, whose fence
     * the output's disk then refused (the run record names it: repair may make it current later).
     */
    readonly publishedBuildHash?: string,
  ) {
    super(`lost claim ${claimName} (fence ${fence}): ${describeLoss(cause)}${detail ? `; ${detail}` : ""}`, { cause });
    this.name = "ClaimLostError";
  }
}

function describeLoss(cause: ClaimLossCause): string {
  switch (cause) {
    case "superseded":
      return "another holder owns it now";
    case "force-released":
      return "an operator force-released it";
    case "expired":
      return "it expired";
    case "deadline":
      return "no refresh succeeded within the TTL";
  }
}

/** A claim name (or the output path / tenant it is built from) that cannot be used. */
export class InvalidClaimNameError extends Error {
  constructor(
    readonly input: string,
    readonly reason: string,
  ) {
    super(`invalid claim name ${JSON.stringify(input)}: ${reason}`);
    this.name = "InvalidClaimNameError";
  }
}
