/**
 * The Prometheus text format (version 0.0.4), written directly. prom-client's registry hashed
 * every label set on each `set`/`inc` and formatted every series through label objects: at 10 000
 * claims and 1 000 series (~37 000 samples) that was most of a scrape. This writes the same bytes
 * prom-client 15 wrote for the same calls: families in creation order, samples in the order of
 * their first `set`/`inc`, HELP and label values escaped alike, values formatted alike, families
 * separated by a blank line.
 *
 * Label sets are passed preformatted (`labelPair`, joined by ","), so a caller formats a label set
 * it reuses (a rebuild × tenant pair) once.
 */

export const EXPOSITION_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

type FamilyType = "gauge" | "counter" | "histogram";

const NEEDS_ESCAPE = /[\\\n"]/;

/** `name="value"`, the value escaped as the text format wants (backslash, newline, quote). */
export function labelPair(name: string, value: string): string {
  if (!NEEDS_ESCAPE.test(value)) return `${name}="${value}"`;
  return `${name}="${escapeText(value).replace(/"/g, '\\"')}"`;
}

function escapeText(text: string): string {
  return text.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
}

function formatValue(value: number): string {
  if (Number.isNaN(value)) return "Nan"; // sic: prom-client 15's spelling
  if (!Number.isFinite(value)) return value < 0 ? "-Inf" : "+Inf";
  return `${value}`;
}

/** Appended lines per joined chunk. */
const APPEND_CHUNK = 512;

export class MetricFamily {
  /** `sample{labels}` → value, in the order first written. */
  private readonly samples = new Map<string, number>();
  /**
   * `append`ed samples, written after the others: lines joined by "\n" a chunk at a time, so the
   * lines (tens of thousands of short-lived strings) die young instead of surviving to the end.
   */
  private readonly appended: string[] = [];
  private pending: string[] = [];

  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: FamilyType,
  ) {}

  /** Sets a sample; `labels` is `labelPair`s joined by ",", or "" for none. */
  set(labels: string, value: number, suffix = ""): void {
    this.samples.set(this.sampleKey(labels, suffix), value);
  }

  /** Adds to a sample (created at 0). A counter refuses what prom-client's refused. */
  inc(labels: string, by = 1): void {
    if (this.type === "counter") {
      if (by && !Number.isFinite(by)) throw new TypeError(`Value is not a valid number: ${by}`);
      if (by < 0) throw new Error("It is not possible to decrease a counter");
    }
    const key = this.sampleKey(labels, "");
    this.samples.set(key, (this.samples.get(key) ?? 0) + by);
  }

  /**
   * Adds a sample the caller knows is new in this family (a claim's TTL, a histogram's lines):
   * written as is, without the lookup `set` and `inc` need (tens of thousands per scrape). Appended
   * samples come after the `set`/`inc` ones; a family that only appends keeps its order.
   */
  append(labels: string, value: number, suffix = ""): void {
    this.pending.push(`${this.sampleKey(labels, suffix)} ${formatValue(value)}`);
    if (this.pending.length === APPEND_CHUNK) this.flushAppended();
  }

  private flushAppended(): void {
    if (this.pending.length === 0) return;
    this.appended.push(this.pending.join("\n"));
    this.pending = [];
  }

  private sampleKey(labels: string, suffix: string): string {
    return labels === "" ? `${this.name}${suffix}` : `${this.name}${suffix}{${labels}}`;
  }

  /** Adds the family's lines to `lines` (joined by "\n", they are its text). */
  formatInto(lines: string[]): void {
    const name = escapeText(this.name);
    lines.push(`# HELP ${name} ${escapeText(this.help)}`, `# TYPE ${name} ${this.type}`);
    for (const [sample, value] of this.samples) lines.push(`${sample} ${formatValue(value)}`);
    this.flushAppended();
    for (const chunk of this.appended) lines.push(chunk);
  }
}

/** The families in the order created; `format()` is the scrape's body. */
export class Exposition {
  private readonly families: MetricFamily[] = [];

  family(name: string, help: string, type: FamilyType): MetricFamily {
    const family = new MetricFamily(name, help, type);
    this.families.push(family);
    return family;
  }

  /** One join of every line: no intermediate string per family (a scrape has tens of thousands of lines). */
  format(): string {
    const lines: string[] = [];
    this.families.forEach((family, i) => {
      if (i > 0) lines.push("");
      family.formatInto(lines);
    });
    lines.push("");
    return lines.join("\n");
  }
}
