export { acquireClaim } from "./acquire";
export { ClaimLostError, InvalidClaimNameError, type ClaimLossCause } from "./errors";
export {
  forceReleaseClaim,
  type ForceReleaseClients,
  type ForceReleaseRequest,
  type ForceReleaseResult,
} from "./force-release";
export { ClaimKeeper, type ClaimKeeperEvent, type HeldClaim } from "./keeper";
export {
  listClaims,
  readClaim,
  readClaimsByName,
  staleReasons,
  MAX_CLAIMS_PAGE,
  type ClaimInfo,
  type ClaimPage,
  type ListClaimsOptions,
  type StaleReason,
} from "./list";
export {
  assertValidClaimName,
  checkClaimName,
  claimName,
  tryClaimName,
  MAX_CLAIM_NAME_BYTES,
  type ClaimNameCheck,
} from "./name";
export {
  publishFenced,
  readListedPublish,
  readPublished,
  type PublishedPointer,
  type PublishRequest,
  type PublishResult,
} from "./publish";
export { refreshClaim } from "./refresh";
export { releaseClaim } from "./release";
export { readSkips, readSkipsMany, recordSkip, resetSkips } from "./skips";
export { assertClaimTiming } from "./timing";
export { newClaimToken } from "./token";
export type { AcquireResult, ClaimHolder, ClaimMetadata, ClaimTiming, RefreshResult, ReleaseResult } from "./types";
export {
  withClaim,
  type ReleaseOutcome,
  type WithClaimEvent,
  type WithClaimOptions,
  type WithClaimResult,
} from "./with-claim";
export {
  readClaimTrail,
  readEndedClaims,
  TRAIL_KINDS,
  type TrailEntry,
  type TrailHolder,
  type TrailKind,
} from "./trail";
