/** `claimwatch pause <rebuild> [--tenant T] --reason R`: stop a schedule enqueuing (./schedule-change.ts). */
import { scheduleCommand } from "./schedule-change";

export const pause = scheduleCommand("pause");
