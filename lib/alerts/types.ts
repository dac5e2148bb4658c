/** Alerts as claimwatch stores and delivers them; the label set follows Prometheus' conventions. */
import type { RuleName, Severity } from "./config";

export interface AlertLabels {
  alertname: RuleName;
  severity: Severity;
  /** Empty where it does not apply (Alertmanager drops empty labels). */
  rebuild: string;
  tenant: string;
  claim: string;
  service: "claimwatch";
  [extra: string]: string;
}

export interface AlertAnnotations {
  summary: string;
  description: string;
  /** The dashboard page that shows it (built from CLAIMWATCH_PUBLIC_URL). */
  link: string;
}

/** An alert whose condition holds now (the output of the rules). */
export interface ActiveAlert {
  /** Stable across evaluations while the same condition holds: `<rule>|<subject>`. */
  id: string;
  labels: AlertLabels;
  annotations: AlertAnnotations;
  /** When the condition began, where the rule knows it (ms); else the evaluation time. */
  since: number | null;
}

/** An alert as stored while firing. */
export interface FiringAlert {
  id: string;
  labels: AlertLabels;
  annotations: AlertAnnotations;
  /** ms, main-Redis clock. */
  startsAt: number;
  /** When its labels and annotations were last brought up to date while it kept firing (commit.ts). */
  updatedAt?: number;
}

export type TransitionStatus = "firing" | "resolved";

/** One change of one alert; delivered once to every receiver. */
export interface AlertTransition {
  /** Random id; a delivery id is `<transition id>.<receiver>`. */
  id: string;
  status: TransitionStatus;
  alert: FiringAlert;
  /** ms: the fire time, or the resolve time. */
  at: number;
  /** Set when resolved. */
  endsAt: number | null;
}

/** A transition waiting for one receiver to accept it. */
export interface Delivery {
  id: string;
  receiver: string;
  transition: AlertTransition;
  attempts: number;
  /** ms (main-Redis clock): not to be sent before this. */
  nextAt: number;
  createdAt: number;
  lastError: string | null;
  /** A test notification from the Alerts page rather than a rule. */
  test?: boolean;
}

/** A receiver's last delivery, for the Alerts page. */
export interface ReceiverStatus {
  receiver: string;
  status: "delivered" | "failed" | "dropped";
  at: number;
  deliveryId: string;
  error: string | null;
  /** Deliveries waiting for this receiver. */
  queued?: number;
}
