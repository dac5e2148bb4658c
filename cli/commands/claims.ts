/** `claimwatch claims`: the active claims, as the Claims page lists them. */
import { EVALUATOR_CLAIM, evaluatorHolderLabel } from "../../lib/alerts/evaluator-claim";
import { getClaims, type ApiClaim } from "../../lib/api/claims";
import { MAX_CLAIMS_PAGE } from "../../lib/claims";
import { duration, orDash, rebuildLabel, table } from "../../lib/cli/format";
import { EXIT } from "../outcome";
import { connect, loadSetup } from "../session";
import type { CommandSpec } from "./spec";

/** Pages read at most (MAX_CLAIMS_PAGE each): far more claims than one claimwatch has. */
const MAX_PAGES = 100;

const holderOf = (claim: ApiClaim) =>
  claim.holder.workerId ?? (claim.holder.host ? `${claim.holder.host}:${claim.holder.pid ?? "?"}` : "–");

export const claims: CommandSpec = {
  usage: "claims",
  summary: "active claims: name, holder, fence, TTL left, stale? (and the token `release` needs)",
  async run() {
    const context = await connect(loadSetup());
    try {
      const all: ApiClaim[] = [];
      let cursor: string | undefined;
      let serverTime = 0;
      for (let page = 0; page < MAX_PAGES; page++) {
        const result = await getClaims(context, { limit: MAX_CLAIMS_PAGE, cursor });
        all.push(...result.claims);
        serverTime = result.serverTime;
        if (!result.nextCursor) break;
        cursor = result.nextCursor;
      }
      const human = all.length
        ? table(
            ["CLAIM", "REBUILD", "HOLDER", "FENCE", "TTL LEFT", "STATE", "TOKEN"],
            all.map((c) => [
              c.name,
              c.name === EVALUATOR_CLAIM
                ? `(alerts evaluator: ${evaluatorHolderLabel(c.rebuild)})`
                : rebuildLabel(c.rebuild, c.tenant),
              holderOf(c),
              orDash(c.fence),
              duration(c.pttlMs),
              c.revoked
                ? `releasing: force-released by ${c.revoked.by ?? "an operator"}, waiting for the holder to stop`
                : c.stale
                  ? `stale: ${c.staleReason ?? "no refresh"}`
                  : "live",
              c.token,
            ]),
          )
        : ["No active claims."];
      return { exitCode: EXIT.ok, json: { claims: all, serverTime }, human };
    } finally {
      await context.close();
    }
  },
};
