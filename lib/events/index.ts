export { appendEventInto, publishEvent, EVENTS_KEPT } from "./publish";
export { claimEvents } from "./claim-events";
export type { ClaimSnapshot, ClaimwatchEvent, DeliveredEvent, StoredEvent } from "./types";
