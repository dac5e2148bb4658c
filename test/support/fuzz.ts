/**
 * Seeded generators of hostile input for the fuzz tests: JSON texts, strings, numbers, keys,
 * URL path segments, query strings and raw bodies. Every run prints its seed; a failure is
 * replayed with `FUZZ_SEED=<seed> FUZZ_RUNS=<runs>`. No dependency (fast-check is not installed).
 *
 * Strings that should never become part of a key or a file name carry the run's `marker`, so a
 * test can search Redis and the file system for it instead of comparing whole listings.
 */
import crypto from "node:crypto";

/** mulberry32: a tiny 32-bit PRNG; good enough for test input, and the same sequence everywhere. */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/** A stable 32-bit hash of a label, to give each route or case its own stream from one seed. */
export function streamSeed(seed: number, label: string): number {
  return crypto.createHash("sha256").update(`${seed}:${label}`).digest().readUInt32LE(0);
}

export interface FuzzSettings {
  seed: number;
  runs: number;
}

/**
 * `FUZZ_SEED` (a whole number; default: random) and `FUZZ_RUNS` (default `defaultRuns`), printed
 * as the line to paste to replay this run.
 */
export function fuzzSettings(label: string, defaultRuns: number): FuzzSettings {
  const seedText = process.env.FUZZ_SEED?.trim();
  const runsText = process.env.FUZZ_RUNS?.trim();
  if (seedText && !/^\d{1,10}$/.test(seedText)) throw new Error(`FUZZ_SEED must be a whole number, got ${seedText}`);
  if (runsText && !/^\d{1,7}$/.test(runsText)) throw new Error(`FUZZ_RUNS must be a whole number, got ${runsText}`);
  const seed = seedText ? Number(seedText) >>> 0 : crypto.randomInt(2 ** 32 - 1);
  const runs = runsText ? Math.max(1, Number(runsText)) : defaultRuns;
  process.stdout.write(`[fuzz] ${label}: replay with FUZZ_SEED=${seed} FUZZ_RUNS=${runs}\n`);
  return { seed, runs };
}

/** Characters that break naive handling: lone surrogates, bidi overrides, NUL, joiners, emoji. */
export const NASTY_CHARACTERS = [
  "\u0000",
  "\u0001",
  "\u001b[31m",
  "\u007f",
  "\u0085",
  "\u00a0",
  "\u00ad",
  "\u0301",
  "\u200b",
  "\u200d",
  "\u200e",
  "\u202e",
  "\u2028",
  "\u2029",
  "\ufeff",
  "\ufffd",
  "\uffff",
  "\ud800",
  "\udfff",
  "\udbff\udfff",
  "\ud83d",
  "👩‍💻",
  "🏳️‍🌈",
  "𝕳",
  "ﷺ",
  "עברית",
  "العربية",
  "Ω",
  "ǅ",
  "İ",
  "ß",
  "ﬁ",
  "１２３",
  "٣",
  "\t",
  "\r\n",
  "\n",
  " ",
];

const GLOB = ["*", "?", "[", "]", "[a-z]", "{a,b}", "**", "\\", "^", "!"];

const PROTO_NAMES = [
  "__proto__",
  "constructor",
  "prototype",
  "toString",
  "valueOf",
  "hasOwnProperty",
  "__defineGetter__",
];

/** Number literals as JSON text, including ones JSON.stringify cannot write (-0, 1e999). */
const NUMBER_TEXTS = [
  "0",
  "-0",
  "1",
  "-1",
  "1.5",
  "1e308",
  "-1e308",
  "1e999",
  "-1e999",
  "5e-324",
  "9007199254740993",
  "123456789012345678901234567890",
  "1E+2",
  "0.1e1",
  "2147483648",
  "4294967296",
  "65535",
  "255",
  "256",
];

/** Strings that look like numbers, booleans or nothing to a lenient parser. */
const NUMBERISH = [
  "NaN",
  "Infinity",
  "-Infinity",
  "-0",
  "1e308",
  "0x10",
  "0o7",
  "0b1",
  " 42 ",
  "1_000",
  "",
  "null",
  "true",
  "undefined",
  "00000001",
  "1.0",
  "+1",
  "-1",
  "9".repeat(40),
];

const INJECTION = [
  "${7*7}",
  "{{7*7}}",
  "%s%s%s%n",
  "<script>alert(1)</script>",
  "'; DROP TABLE runs; --",
  '"',
  "\\u0000",
  "\\",
  "KEYS *",
  "*1\r\n$8\r\nFLUSHALL\r\n",
  "\r\nSET x 1\r\n",
  "{tag}",
  "}{",
  "-a1",
  ":",
  "::",
  "output:",
  "tenant:",
  "tenant::output:/x",
];

export interface FuzzerOptions {
  /** Plausible values (configured names, versions) so some inputs get past the first check. */
  vocabulary?: readonly string[];
  /**
   * Embedded into hostile strings; defaults to `cwfz~<seed in base 36>`. The `~` is in no valid
   * name or version, so a string carrying the marker is always one the product must refuse.
   */
  marker?: string;
}

/** One seeded stream of hostile input. */
export class Fuzzer {
  readonly marker: string;
  /**
   * Every string and key this fuzzer handed out (up to 4 KB each; longer ones fit in no key),
   * so a test can check that none of them became part of a Redis key or a file name.
   */
  readonly emitted = new Set<string>();
  private readonly random: () => number;
  private readonly vocabulary: readonly string[];

  constructor(seed: number, options: FuzzerOptions = {}) {
    this.random = mulberry32(seed);
    this.marker = options.marker ?? fuzzMarker(seed);
    this.vocabulary = options.vocabulary ?? [];
  }

  private keep(text: string): string {
    if (text.length <= 4_096) this.emitted.add(text);
    return text;
  }

  /** A whole number in [0, n). */
  int(n: number): number {
    return Math.floor(this.random() * n);
  }

  chance(p: number): boolean {
    return this.random() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new RangeError("pick from an empty list");
    return items[this.int(items.length)]!;
  }

  /** Paths that escape, are absolute, or smuggle `..` past a naive check; most carry the marker. */
  hostilePath(): string {
    const m = this.marker;
    return this.pick([
      "..",
      "../",
      "./..",
      "/",
      "//",
      ".",
      `../../${m}`,
      `../../../../../../tmp/${m}`,
      `/tmp/${m}`,
      `/${m}`,
      `/etc/${m}`,
      `out/../../${m}`,
      `..\\..\\${m}`,
      `C:\\${m}`,
      `\\\\server\\share\\${m}`,
      `file:///tmp/${m}`,
      `~/${m}`,
      `%2e%2e%2f${m}`,
      `..%2F..%2F${m}`,
      `....//${m}`,
      `${m}/..`,
      `output:/../${m}`,
      `output:/srv/../../${m}`,
      `output:../${m}`,
      `tenant:acme:output:/../${m}`,
      `tenant:../${m}:output:/x`,
      `output:/tmp/${m}\u0000.txt`,
      `output:/${m}*`,
      `${m}\u0000`,
    ]);
  }

  /** A short string mixing ASCII, hostile characters and glob characters. */
  private mixed(maxPieces = 6): string {
    let text = "";
    const pieces = 1 + this.int(maxPieces);
    for (let i = 0; i < pieces; i++) {
      const kind = this.int(5);
      if (kind === 0) text += this.pick(NASTY_CHARACTERS);
      else if (kind === 1) text += this.pick(GLOB);
      else if (kind === 2) text += String.fromCharCode(0x20 + this.int(0x5f));
      else if (kind === 3) text += String.fromCharCode(this.int(0x10000));
      else text += this.marker;
    }
    return text;
  }

  /** Strings from every hostile category; long ones are 20 KB and more. */
  hostileString(): string {
    return this.keep(this.pickString());
  }

  private pickString(): string {
    switch (this.int(12)) {
      case 0: {
        const unit = this.pick(["A", "é", "👩‍💻", "\u202e", "..", "/", "*", "\u0000", this.marker]);
        return unit.repeat(Math.ceil((20_480 + this.int(8_192)) / unit.length));
      }
      case 1:
        return "x".repeat(1 + this.int(700));
      case 2:
        return this.hostilePath();
      case 3:
        return this.pick(GLOB) + this.marker + this.pick(GLOB);
      case 4:
        return this.pick(PROTO_NAMES);
      case 5:
        return this.pick(NUMBERISH);
      case 6:
        return this.pick(INJECTION) + this.marker;
      case 7:
      case 8:
        return this.mixed();
      case 9:
        return this.pick(NASTY_CHARACTERS).repeat(1 + this.int(3));
      default:
        return this.plausible();
    }
  }

  /** A configured name, a valid-looking value, or a near miss of one. */
  plausible(): string {
    return this.keep(this.pickPlausible());
  }

  private pickPlausible(): string {
    const base = this.vocabulary.length > 0 ? this.pick(this.vocabulary) : "slow";
    switch (this.int(6)) {
      case 0:
        return base.toUpperCase();
      case 1:
        return ` ${base}`;
      case 2:
        return `${base}\u0000`;
      case 3:
        return base.normalize("NFD") + "\u0301";
      default:
        return base;
    }
  }

  /** A hostile object key: prototype names, empty, huge, unicode, dotted paths. */
  hostileKey(): string {
    return this.keep(this.pickKey());
  }

  private pickKey(): string {
    switch (this.int(6)) {
      case 0:
      case 1:
        return this.pick(PROTO_NAMES);
      case 2:
        return this.pick(["", " ", "a.b", "0", "-1", "length", "then", "toJSON", "__lookupGetter__"]);
      case 3:
        return "k".repeat(1 + this.int(2_000));
      default:
        return this.hostileString().slice(0, 300);
    }
  }

  /** JSON text of a hostile number (including -0 and 1e999, which parse to -0 and Infinity). */
  numberText(): string {
    return this.pick(NUMBER_TEXTS);
  }

  /** JSON text of an array or object nested `depth` deep (10 000 deep is 20 KB of brackets). */
  deepNesting(depth: number, kind: "array" | "object" = "array"): string {
    return kind === "array" ? "[".repeat(depth) + "]".repeat(depth) : '{"a":'.repeat(depth) + "1" + "}".repeat(depth);
  }

  /** Random hostile JSON text: any type, prototype keys, duplicates, deep nesting, huge strings. */
  jsonText(depth = 3): string {
    const kind = depth <= 0 ? this.int(4) : this.int(10);
    switch (kind) {
      case 0:
        return this.pick(["null", "true", "false", "[]", "{}", '""']);
      case 1:
        return this.numberText();
      case 2:
      case 3:
        return JSON.stringify(this.hostileString());
      case 4: {
        const items = Array.from({ length: this.int(5) }, () => this.jsonText(depth - 1));
        return `[${items.join(",")}]`;
      }
      case 5:
      case 6: {
        const entries = Array.from(
          { length: this.int(5) },
          () => `${JSON.stringify(this.hostileKey())}:${this.jsonText(depth - 1)}`,
        );
        return `{${entries.join(",")}}`;
      }
      case 7:
        return this.pick([
          '{"__proto__":{"polluted":1}}',
          '{"constructor":{"prototype":{"polluted":1}}}',
          '{"__proto__":{"__proto__":{"polluted":1}}}',
          '{"prototype":{"polluted":1}}',
          '[{"__proto__":{"polluted":1}}]',
        ]);
      case 8:
        return this.deepNesting(1 + this.int(7_000), this.chance(0.5) ? "array" : "object");
      default: {
        const key = JSON.stringify(this.hostileKey());
        return `{${key}:${this.jsonText(depth - 1)},${key}:${this.jsonText(depth - 1)}}`;
      }
    }
  }

  /**
   * JSON text of `template` with one hostile change: a field's value replaced, an unknown or
   * prototype key added, a field dropped, a key given twice, the body wrapped in an array or
   * replaced — or, now and then, the template itself (so valid requests are part of the mix).
   */
  mutateJson(template: Record<string, unknown>): string {
    const entries: [string, string][] = Object.entries(template).map(([k, v]) => [k, JSON.stringify(v)]);
    const write = (list: [string, string][]) => `{${list.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(",")}}`;
    const field = entries.length > 0 ? this.int(entries.length) : -1;
    switch (this.int(11)) {
      case 0:
        return write(entries);
      case 1:
      case 2:
      case 3:
        if (field >= 0) entries[field]![1] = JSON.stringify(this.hostileString());
        return write(entries);
      case 4:
        if (field >= 0) entries[field]![1] = this.jsonText(2);
        return write(entries);
      case 5:
        entries.splice(this.int(entries.length + 1), 0, [this.hostileKey(), this.jsonText(1)]);
        return write(entries);
      case 6:
        entries.push(
          this.pick<[string, string]>([
            ["__proto__", '{"polluted":1}'],
            ["constructor", '{"prototype":{"polluted":1}}'],
            ["__proto__", "null"],
            ["__proto__", write(entries)],
          ]),
        );
        return write(entries);
      case 7:
        if (field >= 0) entries.splice(field, 1);
        return write(entries);
      case 8:
        if (field >= 0) entries.push([entries[field]![0], this.jsonText(1)]);
        return write(entries);
      case 9:
        return this.pick([`[${write(entries)}]`, JSON.stringify(Object.values(template)), this.jsonText(2)]);
      default:
        if (field >= 0) entries[field]![1] = JSON.stringify(this.plausible());
        return write(entries);
    }
  }

  /** A raw request body that is not (valid) JSON, with the content type to send it as. */
  rawBody(template: Record<string, unknown>): { body: Buffer; contentType: string | null; label: string } {
    const json = Buffer.from(JSON.stringify(template));
    switch (this.int(12)) {
      case 0:
        return { body: json.subarray(0, this.int(json.length)), contentType: "application/json", label: "truncated" };
      case 1:
        return { body: crypto.randomBytes(this.int(2_000)), contentType: "application/json", label: "random bytes" };
      case 2:
        return {
          body: Buffer.from([0xff, 0xfe, 0xc0, 0xae, 0xed, 0xa0, 0x80, 0x7b, 0x7d]),
          contentType: "application/json",
          label: "invalid UTF-8",
        };
      case 3:
        return {
          body: json,
          contentType: this.pick(["text/plain", "application/xml", "image/png"]),
          label: "wrong type",
        };
      case 4: {
        const form = new URLSearchParams(Object.entries(template).map(([k, v]) => [k, String(v)])).toString();
        return { body: Buffer.from(form), contentType: "application/x-www-form-urlencoded", label: "form" };
      }
      case 5:
        return {
          body: Buffer.from(`--b\r\nContent-Disposition: form-data; name="name"\r\n\r\n${this.marker}\r\n--b--\r\n`),
          contentType: "multipart/form-data; boundary=b",
          label: "multipart",
        };
      case 6:
        return { body: json, contentType: null, label: "no content type" };
      case 7:
        return {
          body: Buffer.from(JSON.stringify(template), "utf16le"),
          contentType: "application/json; charset=utf-16",
          label: "UTF-16",
        };
      case 8:
        return { body: Buffer.from("[".repeat(10_000)), contentType: "application/json", label: "10k open brackets" };
      case 9:
        return { body: Buffer.from(this.deepNesting(10_000)), contentType: "application/json", label: "10k deep" };
      case 10:
        return {
          body: Buffer.from(
            this.pick(["NaN", "undefined", "{'a':1}", "{a:1}", "[1,]", '{"a":1}{"b":2}', "\u0000", " "]),
          ),
          contentType: "application/json",
          label: "not JSON",
        };
      default:
        return {
          body: Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), json]),
          contentType: "application/json",
          label: "BOM",
        };
    }
  }

  /** A URL path segment as sent on the wire: percent-encoded hostile text, or a crafted raw one. */
  pathSegment(): string {
    if (this.chance(0.3)) {
      const m = this.marker;
      return this.pick([
        "..%2F..%2Fetc",
        `..%2F..%2F${m}`,
        "%2e%2e",
        `%2e%2e%2f${m}`,
        "%00",
        `${m}%00`,
        "%",
        "%zz",
        "%E0%A4%A",
        "%C0%AE%C0%AE",
        "%ED%A0%80",
        `${m}*`,
        `${m}%2A%3F%5B%5D`,
        `[${m}]`,
        `${m};x=1`,
        "%20",
        "+",
        `${m}%0d%0aX-Injected:%201`,
        "x".repeat(3_000 + this.int(3_000)),
        percentEncode(this.plausible()),
      ]);
    }
    return percentEncode(this.hostileString().slice(0, 2_000)) || "%20";
  }

  /** A query string (with `?`) over `names` and hostile names: duplicates, raw `%`, long values. */
  queryString(names: readonly string[]): string {
    if (this.chance(0.05)) return this.pick(["?", "?&&&", "?=", "?=x", "?&", `?${this.marker}`, "?%", "?a=%zz"]);
    const parts: string[] = [];
    const count = this.int(4) + (this.chance(0.1) ? 1 : 0);
    for (let i = 0; i < count; i++) {
      const name = this.chance(0.75) && names.length > 0 ? this.pick(names) : this.hostileKey().slice(0, 100);
      const value = this.chance(0.3)
        ? this.plausible()
        : this.hostileString().slice(0, this.chance(0.1) ? 12_000 : 400);
      parts.push(
        this.chance(0.1)
          ? `${percentEncode(name)}=${this.pick(["%00", "%", "%zz", "%E0%A4%A", "%ED%A0%80", "+", "a+b", "%2B"])}`
          : `${percentEncode(name)}=${percentEncode(value)}`,
      );
      if (this.chance(0.1)) parts.push(parts[parts.length - 1]!);
    }
    return parts.length > 0 ? `?${parts.join("&")}` : "";
  }
}

/** The string a run embeds into hostile input (see FuzzerOptions.marker). */
export function fuzzMarker(seed: number): string {
  return `cwfz~${(seed >>> 0).toString(36)}`;
}

/**
 * Percent-encodes every byte of the UTF-8 form except unreserved characters. Unlike
 * encodeURIComponent it does not throw on lone surrogates (they are sent as U+FFFD's bytes).
 */
export function percentEncode(text: string): string {
  let out = "";
  for (const byte of Buffer.from(text, "utf8")) {
    const char = String.fromCharCode(byte);
    out += /[A-Za-z0-9_.~-]/.test(char) ? char : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

/** JSON string literal of `text` with invisible and line-breaking characters escaped too (lone surrogates already are). */
export function visible(text: string): string {
  return JSON.stringify(text).replace(
    /[\u007f-\u00a0\u00ad\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]/g,
    (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/** Own property names added to Object.prototype (or Array.prototype) since `before`. */
export function prototypeSnapshot(): string[] {
  return [
    ...Object.getOwnPropertyNames(Object.prototype).map((n) => `Object.${n}`),
    ...Object.getOwnPropertyNames(Array.prototype).map((n) => `Array.${n}`),
  ].sort();
}

/** Throws when Object.prototype carries a property a fuzzed `__proto__` payload would set. */
export function assertNoPrototypePollution(before: readonly string[]): void {
  const probe = {} as Record<string, unknown>;
  const added = prototypeSnapshot().filter((name) => !before.includes(name));
  if (probe.polluted !== undefined || added.length > 0 || ([] as unknown as Record<string, unknown>).polluted) {
    throw new Error(`Object.prototype was polluted: ${JSON.stringify({ polluted: probe.polluted, added })}`);
  }
}
