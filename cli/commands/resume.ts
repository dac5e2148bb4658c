/** `claimwatch resume <rebuild> [--tenant T] --reason R`: resume a paused schedule (./schedule-change.ts). */
import { scheduleCommand } from "./schedule-change";

export const resume = scheduleCommand("resume");
