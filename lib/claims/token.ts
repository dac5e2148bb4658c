/** Claim owner tokens: `host:pid:random`, readable in the dashboard and unique per grant. */
import crypto from "node:crypto";
import os from "node:os";

/** The host name with anything but `[A-Za-z0-9_.-]` replaced, so the token has exactly two ':'. */
const TOKEN_HOST =
  os
    .hostname()
    .replace(/[^A-Za-z0-9_.-]/g, "_")
    .slice(0, 64) || "host";

/** 122 random bits (UUID v4 without dashes; Node serves these from a pre-filled entropy pool). */
export function newClaimToken(): string {
  return `${TOKEN_HOST}:${process.pid}:${crypto.randomUUID().replaceAll("-", "")}`;
}
