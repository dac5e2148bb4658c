/**
 * Claim names. A claim is named for the resource two runs would collide on — the normalised
 * output path — plus the tenant, because two tenants' rebuilds write different outputs and must
 * not queue behind one shared claim. Never name a claim for the task, queue or schedule.
 *
 * Forms (unambiguous: a tenant cannot contain ':'):
 *   output:<path>                     e.g. output:builds/incidents
 *   tenant:<tenant>:output:<path>     e.g. tenant:acme:output:builds/incidents
 */
import { InvalidClaimNameError } from "./errors";

/** Longest claim name, in UTF-8 bytes (names become parts of Redis keys and UI rows). */
export const MAX_CLAIM_NAME_BYTES = 512;

const TENANT_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
const OUTPUT_PREFIX = "output:";
const TENANT_PREFIX = "tenant:";

export type ClaimNameCheck = { ok: true; name: string } | { ok: false; reason: string };

/** The claim name for an output path (and tenant); throws `InvalidClaimNameError` with the reason. */
export function claimName(output: string, tenant?: string | null): string {
  const check = tryClaimName(output, tenant);
  if (!check.ok) throw new InvalidClaimNameError(tenant ? `${tenant}:${output}` : output, check.reason);
  return check.name;
}

/**
 * Like `claimName`, as a value: for config validation and form input. The path is normalised
 * (NFC; `.` segments, repeated and trailing slashes dropped), so `./builds//incidents/` and
 * `builds/incidents` name one claim. `..` is rejected rather than resolved: a claim must not
 * depend on where a relative path happens to lead.
 */
export function tryClaimName(output: string, tenant?: string | null): ClaimNameCheck {
  if (typeof output !== "string" || output.trim() === "") return fail("the output path is empty");
  const problem = unsafeCharacters(output);
  if (problem) return fail(`the output path ${problem}`);
  const segments = output.normalize("NFC").split("/");
  if (segments.includes("..")) return fail("the output path has a '..' segment");
  const absolute = output.startsWith("/");
  const kept = segments.filter((segment) => segment !== "" && segment !== ".");
  if (kept.length === 0) {
    return fail(absolute ? "the output path is the root directory" : "the output path names no directory");
  }
  const path = (absolute ? "/" : "") + kept.join("/");

  let name = `${OUTPUT_PREFIX}${path}`;
  if (tenant !== undefined && tenant !== null) {
    if (!TENANT_PATTERN.test(tenant)) {
      return fail(
        `the tenant ${JSON.stringify(tenant)} must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit`,
      );
    }
    name = `${TENANT_PREFIX}${tenant}:${name}`;
  }
  const bytes = Buffer.byteLength(name, "utf8");
  if (bytes > MAX_CLAIM_NAME_BYTES)
    return fail(`the claim name is ${bytes} bytes; the limit is ${MAX_CLAIM_NAME_BYTES}`);
  return { ok: true, name };
}

/**
 * Whether `name` is a claim name exactly as `claimName` builds it (for names arriving from a
 * request, e.g. an operator's force release).
 */
export function checkClaimName(name: string): ClaimNameCheck {
  if (typeof name !== "string" || name === "") return fail("the claim name is empty");
  let tenant: string | undefined;
  let rest = name;
  if (rest.startsWith(TENANT_PREFIX)) {
    const end = rest.indexOf(":", TENANT_PREFIX.length);
    if (end < 0) return fail(`a tenant claim name looks like tenant:<tenant>:output:<path>`);
    tenant = rest.slice(TENANT_PREFIX.length, end);
    rest = rest.slice(end + 1);
  }
  if (!rest.startsWith(OUTPUT_PREFIX)) {
    return fail("a claim name looks like output:<path> or tenant:<tenant>:output:<path>");
  }
  const rebuilt = tryClaimName(rest.slice(OUTPUT_PREFIX.length), tenant);
  if (!rebuilt.ok) return rebuilt;
  if (rebuilt.name !== name) return fail(`the claim name is not normalised; expected ${JSON.stringify(rebuilt.name)}`);
  return rebuilt;
}

/**
 * Names already found valid. A process uses few distinct names (one per output and tenant) and
 * checks them on every acquire; the check is pure, so its answer is kept. Bounded: cleared when full.
 */
const knownValidNames = new Set<string>();
const KNOWN_VALID_NAMES_MAX = 10_000;

/** Throws `InvalidClaimNameError` unless `name` is a canonical claim name. */
export function assertValidClaimName(name: string): void {
  if (knownValidNames.has(name)) return;
  const check = checkClaimName(name);
  if (!check.ok) throw new InvalidClaimNameError(name, check.reason);
  if (knownValidNames.size >= KNOWN_VALID_NAMES_MAX) knownValidNames.clear();
  knownValidNames.add(name);
}

/**
 * Glob characters are refused so a claim name is also a literal pattern for operators'
 * `redis-cli --scan --pattern`; control characters because they corrupt logs and UI rows.
 */
function unsafeCharacters(text: string): string | undefined {
  // eslint-disable-next-line no-control-regex
  const control = /[\u0000-\u001f\u007f-\u009f]/.exec(text);
  if (control) {
    const code = control[0].charCodeAt(0).toString(16).toUpperCase().padStart(4, "0");
    return `contains the control character U+${code} at position ${control.index}`;
  }
  const glob = /[*?[\]\\]/.exec(text);
  if (glob) return `contains the glob character '${glob[0]}' at position ${glob.index}`;
  if (text.trim() !== text) return "starts or ends with whitespace";
  return undefined;
}

function fail(reason: string): ClaimNameCheck {
  return { ok: false, reason };
}
