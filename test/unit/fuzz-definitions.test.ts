/**
 * Fuzzing the rebuild definitions loader with generated documents: random YAML text, valid
 * documents with one field made hostile, unknown and `__proto__` keys, huge numbers, absolute and
 * `..` paths, deep nesting, 1000 rebuilds. `parseDefinitions` and `loadDefinitions` must answer
 * `{ok:false}` with one line starting with the file name, or `{ok:true}` for a document that is
 * valid — never throw, never pollute Object.prototype, never accept a definition the product
 * cannot use. Replay a failure with the printed `FUZZ_SEED=… FUZZ_RUNS=…`.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { stringify } from "yaml";
import { tryClaimName } from "../../lib/claims/name";
import { loadDefinitions, parseDefinitions, tenantsOf, type DefinitionsResult } from "../../lib/rebuilds/definitions";
import {
  assertNoPrototypePollution,
  fuzzSettings,
  Fuzzer,
  NASTY_CHARACTERS,
  prototypeSnapshot,
  streamSeed,
  visible,
} from "../support/fuzz";

const { seed, runs } = fuzzSettings("fuzz-definitions", 300);
const replay = `FUZZ_SEED=${seed} FUZZ_RUNS=${runs}`;
const NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;

/** What a case is known to be: valid, invalid, or either (hostile value of the right type). */
type Expectation = "valid" | "invalid" | "either";

interface Case {
  label: string;
  /** The document as data (for parseDefinitions) or as text (for loadDefinitions). */
  raw?: unknown;
  text?: string;
  file: string;
  expect: Expectation;
}

interface Outcome {
  kase: Case;
  result?: DefinitionsResult;
  thrown?: unknown;
  ms: number;
}

let dir: string;
let prototypeBefore: string[];
const outcomes: Outcome[] = [];
let yamlWarnings = 0;

// --- generators -------------------------------------------------------------------------

const CRONS = ["0 2 * * *", "*/5 * * * *", "0 0 1 1 *", "30 3 * * 1-5", "0 */6 * * *"];
const ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"];
const DURATIONS = ["1s", "90s", "10m", "2h", "1d", "1h30m", "500ms"];

function validName(f: Fuzzer, i: number): string {
  return f.pick([`r${i}`, `rebuild-${i}`, `R_${i}x`, `${i}a`, `n${i}-${"z".repeat(f.int(55))}`.slice(0, 64)]);
}

/** A valid document: every optional field now and then, consistent durations, distinct outputs. */
function validDocument(f: Fuzzer, count = 1 + f.int(5)): Record<string, unknown> {
  const rebuilds: Record<string, unknown> = {};
  for (let i = 0; i < count; i++) {
    const name = validName(f, i);
    const rebuild: Record<string, unknown> = {
      output: f.pick([`out/${name}`, `/srv/outputs/${name}`, `./builds//${name}/`, `builds/${name}.d`]),
      steps: [
        f.chance(0.7)
          ? {
              name: "build",
              run: ["sh", "-c", f.pick(["true", "echo {version}", "tar -czf out.tgz ."])],
              ...(f.chance(0.3) ? { env: { MODE: "full", _X: "1" }, cwd: "work", transientExitCodes: [75, 1] } : {}),
              ...(f.chance(0.3) ? { killGrace: f.pick(DURATIONS) } : {}),
            }
          : {
              name: "tiles",
              tiles: { input: "in/data.geojson", layer: "parcels", minZoom: 0, maxZoom: 1 + f.int(24) },
            },
      ],
    };
    if (f.chance(0.4)) rebuild.tenants = ["acme", "globex", "initech"].slice(0, 1 + f.int(3));
    if (f.chance(0.4)) rebuild.inputs = ["in/a.csv", "/data/b.csv"].slice(0, 1 + f.int(2));
    if (f.chance(0.3)) rebuild.schedule = { cron: f.pick(CRONS), ...(f.chance(0.5) ? { tz: f.pick(ZONES) } : {}) };
    if (f.chance(0.3)) {
      rebuild.claim = { ttl: "2m", refreshEvery: f.pick(["30s", "1m", "10s"]) };
      rebuild.timeLimit = f.pick(["3m", "1h", "2h"]);
    }
    if (f.chance(0.3)) rebuild.retries = { attempts: 1 + f.int(50), backoff: "1s", maxBackoff: "10m" };
    if (f.chance(0.2)) rebuild.idempotency = { ttl: f.pick(DURATIONS) };
    rebuilds[name] = rebuild;
  }
  const document: Record<string, unknown> = { rebuilds };
  if (f.chance(0.3)) document.retention = { runs: 10 + f.int(1_000), runAge: "30d", completedJobs: 0, failedJobs: 5 };
  return document;
}

type Container = Record<string, unknown> | unknown[];
interface Slot {
  parent: Container;
  key: string | number;
  /** Inside a strict object (an unknown key there must be refused), not a record of names/env. */
  strict: boolean;
}

/** Every value position in a document, with whether its parent is a strict object. */
function slots(value: unknown, strict = true, found: Slot[] = []): Slot[] {
  if (Array.isArray(value)) {
    value.forEach((item, i) => {
      found.push({ parent: value, key: i, strict: false });
      slots(item, true, found);
    });
  } else if (value && typeof value === "object") {
    for (const [key, item] of Object.entries(value)) {
      found.push({ parent: value as Record<string, unknown>, key, strict });
      // `rebuilds` and `env` are records (names → values); everything else is a strict object.
      slots(item, key !== "rebuilds" && key !== "env", found);
    }
  }
  return found;
}

/** An array (or object) nested `depth` deep, built without recursion (JSON.stringify overflows past ~5000). */
function nested(depth: number, objects: boolean): unknown {
  let value: unknown = 1;
  for (let i = 0; i < depth; i++) value = objects ? { a: value } : [value];
  return value;
}

/** JSON text of a case's input, or a note when it is nested too deep for JSON.stringify. */
function jsonOf(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch (error) {
    return `<not serialisable: ${(error as Error).message}>`;
  }
}

const typeOf = (v: unknown) => (v === null ? "null" : Array.isArray(v) ? "array" : typeof v);

/** A hostile value: any JSON type, huge and odd numbers, hostile strings, nesting. */
function hostileValue(f: Fuzzer): unknown {
  switch (f.int(9)) {
    case 0:
      return f.pick([1e308, -1e308, Number.MAX_SAFE_INTEGER + 2, -0, 5e-324, 0.5, -1, 2 ** 31, Infinity, NaN]);
    case 1:
      return f.pick([null, true, false, [], {}]);
    case 2:
      return [f.hostileString()];
    case 3:
      return nested(f.chance(0.5) ? 10_000 : 1 + f.int(3_000), f.chance(0.5));
    case 4:
      return JSON.parse('{"__proto__":{"polluted":1},"constructor":{"prototype":{"polluted":1}}}');
    default:
      return f.hostileString();
  }
}

/** A valid document with one hostile change; known-invalid when a type changed or a strict object gained a key. */
function mutatedDocument(f: Fuzzer): { raw: unknown; expect: Expectation; label: string } {
  const document = validDocument(f);
  const all = slots(document);
  const slot = f.pick(all);
  const original = (slot.parent as Record<string | number, unknown>)[slot.key];
  switch (f.int(6)) {
    case 0: {
      const key = f.chance(0.5) ? f.pick(["__proto__", "constructor", "prototype"]) : f.hostileKey();
      const target = f.pick(all.filter((s) => typeOf((s.parent as Record<string, unknown>)[s.key]) === "object"));
      const object = (target?.parent as Record<string | number, unknown>)?.[target.key] as Record<string, unknown>;
      if (!object) return { raw: document, expect: "valid", label: "unchanged" };
      Object.defineProperty(object, key, {
        value: hostileValue(f),
        enumerable: true,
        configurable: true,
        writable: true,
      });
      // Records accept new keys that are valid names (rebuild names, environment variable names).
      const validKey =
        target.key === "rebuilds"
          ? NAME.test(key)
          : target.key === "env"
            ? /^[A-Za-z_][A-Za-z0-9_]*$/.test(key)
            : false;
      return { raw: document, expect: validKey ? "either" : "invalid", label: `extra key ${visible(key)}` };
    }
    case 1: {
      if (Array.isArray(slot.parent)) slot.parent.splice(slot.key as number, 1);
      else delete slot.parent[slot.key as string];
      return { raw: document, expect: "either", label: `dropped ${slot.key}` };
    }
    default: {
      const value = hostileValue(f);
      (slot.parent as Record<string | number, unknown>)[slot.key] = value;
      const changedType = typeOf(value) !== typeOf(original);
      return {
        raw: document,
        expect: changedType && typeOf(original) !== "number" ? "invalid" : "either",
        label: `${slot.key} → ${typeOf(value)}`,
      };
    }
  }
}

/** YAML text: a valid document's text damaged, YAML features (tags, aliases, merges), or junk. */
function yamlText(f: Fuzzer): { text: string; label: string } {
  const valid = stringify(validDocument(f));
  switch (f.int(9)) {
    case 0: {
      const at = f.int(valid.length);
      return { text: valid.slice(0, at) + f.pick(NASTY_CHARACTERS) + valid.slice(at), label: "character inserted" };
    }
    case 1: {
      const lines = valid.split("\n");
      const i = f.int(lines.length);
      lines.splice(i, 0, lines[i] ?? "");
      return { text: lines.join("\n"), label: "line duplicated" };
    }
    case 2: {
      const lines = valid.split("\n");
      const i = f.int(lines.length);
      lines[i] = f.pick(["\t", " ", "   "]) + (lines[i] ?? "");
      return { text: lines.join("\n"), label: "indentation" };
    }
    case 3:
      return {
        text: f.pick([
          "a: &a [*a]\nrebuilds: {}\n",
          "rebuilds: &r {p: *r}\n",
          'x: &a ["lol","lol"]\ny: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nz: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nw: [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n',
          "rebuilds: !!binary aGVsbG8=\n",
          "rebuilds: !!js/function 'function(){}'\n",
          "rebuilds: !!set {a, b}\n",
          "rebuilds: !<tag:yaml.org,2002:omap> [a: 1]\n",
          "base: &b {output: out, steps: [{name: s, run: [x]}]}\nrebuilds:\n  p:\n    <<: *b\n",
          "rebuilds:\n  __proto__: {output: out, steps: [{name: s, run: [x]}]}\n",
          "__proto__: {polluted: 1}\nrebuilds: {}\n",
          "rebuilds:\n  p:\n    __proto__: {output: out, steps: [{name: s, run: [x]}]}\n",
          "rebuilds:\n  constructor: {output: out, steps: [{name: s, run: [x]}]}\n",
          "rebuilds: {}\n---\nrebuilds: {}\n",
          "? [a, b]\n: 1\n",
          "rebuilds: {p: {output: out, steps: [{name: s, run: [x]}]}, p: {output: o2, steps: [{name: s, run: [x]}]}}\n",
          "retention: {runs: 1e308}\nrebuilds: {}\n",
          "retention: {runs: .nan}\nrebuilds: {}\n",
          "retention: {runs: .inf}\nrebuilds: {}\n",
          "retention: {runs: 0x7FFFFFFFFFFFFFFFFFFF}\nrebuilds: {}\n",
          "retention: {runs: 123456789012345678901234567890}\nrebuilds: {}\n",
          "retention: {runs: -0}\nrebuilds: {}\n",
          "\ufeffrebuilds: {}\n",
          "rebuilds: {}\u0000\n",
          "",
          "~",
          "[]",
          "'just a string'",
          "rebuilds:\n  p:\n    output: '\u202e/etc'\n    steps: [{name: s, run: [x]}]\n",
          `rebuilds:\n  p:\n    output: ${"x".repeat(30_000)}\n    steps: [{name: s, run: [x]}]\n`,
        ]),
        label: "YAML feature",
      };
    case 4:
      return { text: "[".repeat(10_000) + "]".repeat(f.chance(0.5) ? 10_000 : 0), label: "10k deep flow" };
    case 5:
      return {
        text: "a:\n" + Array.from({ length: 500 }, (_, i) => `${" ".repeat(i + 1)}a:`).join("\n"),
        label: "deep block",
      };
    case 6:
      return { text: f.hostileString(), label: "hostile string" };
    case 7:
      return { text: jsonOf(mutatedDocument(f).raw), label: "JSON text of a mutated document" };
    default: {
      const chars = Array.from({ length: f.int(400) }, () =>
        f.pick([...":-[]{}&*!|>'\"%@`#,? \n\t", "a", "1", "\u0000"]),
      );
      return { text: chars.join(""), label: "YAML punctuation" };
    }
  }
}

/** Hostile file names for loadDefinitions (the file itself is written; only its name is odd). */
function fileName(f: Fuzzer, i: number): string {
  return f.pick([
    "claimwatch.yaml",
    "claimwatch.yml",
    `case-${i}.yaml`,
    `ünïcödé ${i}.yaml`,
    `${i}\u202e.yaml`,
    `..${i}.yaml`,
    `-${i}.yaml`,
    `${i} with spaces.yaml`,
    `*${i}?[].yaml`,
  ]);
}

function buildCases(): Case[] {
  const cases: Case[] = [];
  const f = new Fuzzer(streamSeed(seed, "definitions"));
  for (let i = 0; i < runs; i++) {
    cases.push({ label: "valid", raw: validDocument(f), file: "/srv/claimwatch.yaml", expect: "valid" });
    const mutated = mutatedDocument(f);
    cases.push({
      label: mutated.label,
      raw: mutated.raw,
      file: f.pick(["/srv/claimwatch.yaml", "claimwatch.yaml", "../up/cw.yaml", "/claimwatch.yaml"]),
      expect: mutated.expect,
    });
    const text = yamlText(f);
    cases.push({ label: text.label, text: text.text, file: fileName(f, i), expect: "either" });
    cases.push({ label: "hostile value", raw: hostileValue(f), file: "/srv/claimwatch.yaml", expect: "invalid" });
    const paths = validDocument(f, 1);
    const rebuild = Object.values(paths.rebuilds as Record<string, Record<string, unknown>>)[0]!;
    const where = f.pick(["output", "inputs", "cwd", "input"] as const);
    const hostilePath = f.hostilePath();
    if (where === "output") rebuild.output = hostilePath;
    else if (where === "inputs") rebuild.inputs = [hostilePath];
    else if (where === "cwd") rebuild.steps = [{ name: "s", run: ["true"], cwd: hostilePath }];
    else rebuild.steps = [{ name: "t", tiles: { input: hostilePath, layer: "l" } }];
    cases.push({
      label: `path in ${where}: ${visible(hostilePath)}`,
      raw: paths,
      file: "/srv/claimwatch.yaml",
      expect: "either",
    });
  }
  // Fixed cases, whatever the seed: the smallest known inputs of the bugs this fuzzer found.
  const step = [{ name: "s", run: ["true"] }];
  for (const output of ["/", "..", "out/*", "out ", "out\u0085x"]) {
    cases.push({
      label: `known case: output ${visible(output)}`,
      raw: { rebuilds: { p: { output, steps: step } } },
      file: "/srv/claimwatch.yaml",
      expect: "either",
    });
  }
  cases.push({
    label: "known case: a line break in a rebuild name",
    raw: { rebuilds: { "a\nb": { output: "out", steps: step } } },
    file: "/srv/claimwatch.yaml",
    expect: "invalid",
  });
  cases.push({
    label: "known case: a line break in an unknown key",
    raw: { rebuilds: { p: { output: "out", steps: step, "x\ny": 1 } } },
    file: "/srv/claimwatch.yaml",
    expect: "invalid",
  });
  cases.push({
    label: "known case: a rebuild named __proto__",
    raw: JSON.parse('{"rebuilds":{"__proto__":{"output":"out","steps":[{"name":"s","run":["true"]}]}}}'),
    file: "/srv/claimwatch.yaml",
    expect: "invalid",
  });

  const many = validDocument(f, 0);
  const rebuilds = many.rebuilds as Record<string, unknown>;
  for (let i = 0; i < 1_000; i++) {
    rebuilds[`r${i}`] = {
      output: `out/r${i}`,
      tenants: ["acme"],
      schedule: { cron: "0 2 * * *" },
      steps: [{ name: "s", run: ["true"] }],
    };
  }
  cases.push({ label: "1000 rebuilds", raw: many, file: "/srv/claimwatch.yaml", expect: "valid" });
  cases.push({ label: "1000 rebuilds as YAML", text: stringify(many), file: "many.yaml", expect: "valid" });
  return cases;
}

// --- running ----------------------------------------------------------------------------

before(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-fuzz-definitions-"));
  prototypeBefore = prototypeSnapshot();
  // The yaml package reports unresolved tags and odd directives through process.emitWarning;
  // counted here instead of flooding the test output.
  const emitWarning = process.emitWarning;
  process.emitWarning = (() => (yamlWarnings += 1)) as typeof process.emitWarning;
  try {
    runCases();
  } finally {
    process.emitWarning = emitWarning;
  }
  process.stdout.write(`[fuzz] ${outcomes.length} documents; ${yamlWarnings} YAML warnings\n`);
});
after(() => fs.rmSync(dir, { recursive: true, force: true }));

function runCases(): void {
  buildCases().forEach((kase, i) => {
    const started = performance.now();
    try {
      let result: DefinitionsResult;
      if (kase.text !== undefined) {
        const file = path.join(dir, `${i}`, kase.file);
        fs.mkdirSync(path.dirname(file), { recursive: true });
        fs.writeFileSync(file, kase.text);
        kase.file = file;
        result = loadDefinitions(file);
      } else {
        result = parseDefinitions(kase.raw, kase.file);
      }
      outcomes.push({ kase, result, ms: performance.now() - started });
    } catch (thrown) {
      outcomes.push({ kase, thrown, ms: performance.now() - started });
    }
  });
}

/** The input of a case, short enough for a failure message. */
function show(kase: Case): string {
  const shown = kase.text !== undefined ? kase.text : jsonOf(kase.raw);
  const cut = shown.length > 300 ? `${visible(shown.slice(0, 300))}… (${shown.length} chars)` : visible(shown);
  return `${kase.label} (${kase.file}): ${kase.text !== undefined ? "YAML " : ""}${cut}`;
}

/** The smallest failing input per kind of failure, as the assertion message. */
function report(failures: { kind: string; kase: Case; detail: string }[]): string {
  const smallest = new Map<string, { kase: Case; detail: string; size: number; count: number }>();
  for (const failure of failures) {
    const size = (failure.kase.text ?? jsonOf(failure.kase.raw)).length;
    const seen = smallest.get(failure.kind);
    if (!seen || size < seen.size) smallest.set(failure.kind, { ...failure, size, count: (seen?.count ?? 0) + 1 });
    else seen.count += 1;
  }
  return [...smallest.entries()]
    .map(([kind, { kase, detail, count }]) => `${kind} (${count}×), smallest: ${show(kase)}\n    → ${detail}`)
    .concat(`replay: ${replay}`)
    .join("\n  ");
}

test("never throws; every refusal is one line per problem that starts with the file name", () => {
  const failures: { kind: string; kase: Case; detail: string }[] = [];
  for (const { kase, result, thrown } of outcomes) {
    if (thrown !== undefined) {
      failures.push({
        kind: `threw ${(thrown as Error)?.name}`,
        kase,
        detail: String((thrown as Error)?.message ?? thrown).slice(0, 300),
      });
      continue;
    }
    if (result!.ok) continue;
    const { message, problems } = result!.error;
    const names = [path.basename(kase.file), kase.file];
    // A problem's line is `file[:line]: …`; a YAML syntax error is followed by the offending
    // line of the file and a caret, both indented: nothing else may start a line.
    const lines = message.split("\n");
    if (problems.length === 0) failures.push({ kind: "a refusal without a problem", kase, detail: message });
    for (const line of lines) {
      const excerpt = line.startsWith("    ");
      // A string prefix, not a RegExp built from the name: a hostile file name of many kilobytes
      // made V8's regexp compiler run out of memory (a crash of the test, not of the product).
      if (!excerpt && !names.some((name) => line.startsWith(name) && /^(:\d+)?: /.test(line.slice(name.length)))) {
        failures.push({ kind: "a line does not start with the file name", kase, detail: line.slice(0, 300) });
      }
    }
    if (!names.some((name) => lines[0]!.startsWith(name))) {
      failures.push({ kind: "message does not start with the file name", kase, detail: message.slice(0, 300) });
    }
    const lineBreak = /[\r\u0085\u2028\u2029]/.exec(message);
    if (lineBreak) {
      const kind = `message has a line break other than \\n (${visible(lineBreak[0])})`;
      failures.push({ kind, kase, detail: visible(message.slice(0, 300)) });
    }
  }
  assert.equal(failures.length, 0, report(failures));
});

test("valid documents are accepted (1000 rebuilds too); wrong types and unknown keys are refused", () => {
  const failures: { kind: string; kase: Case; detail: string }[] = [];
  for (const { kase, result } of outcomes) {
    if (!result || kase.expect === "either") continue;
    if (kase.expect === "valid" && !result.ok)
      failures.push({ kind: "valid document refused", kase, detail: result.error.message });
    if (kase.expect === "invalid" && result.ok)
      failures.push({ kind: `hostile document accepted (${kase.label.slice(0, 60)})`, kase, detail: kase.label });
  }
  assert.equal(failures.length, 0, report(failures));
  const big = outcomes.filter((o) => o.kase.label.startsWith("1000 rebuilds"));
  assert.equal(big.length, 2);
  for (const { result, ms } of big) {
    assert.ok(result?.ok && result.definitions.rebuilds.size === 1_000);
    console.log(`# 1000 rebuilds parsed in ${Math.round(ms)} ms`); // a figure, not a test goal
  }
});

// An accepted output must have a claim name: `claimName(claimPath, tenant)` throws otherwise, so
// GET /api/rebuilds answers 500 and the worker cannot run the rebuild.
test("what is accepted is usable: plain names, absolute outputs, and a valid claim name per rebuild and tenant", () => {
  const failures: { kind: string; kase: Case; detail: string }[] = [];
  for (const { kase, result } of outcomes) {
    if (!result?.ok) continue;
    for (const [name, rebuild] of result.definitions.rebuilds) {
      if (!NAME.test(name) || rebuild.name !== name)
        failures.push({ kind: "odd rebuild name accepted", kase, detail: name });
      if (!path.isAbsolute(rebuild.outputPath))
        failures.push({ kind: "relative outputPath", kase, detail: rebuild.outputPath });
      if (Object.getPrototypeOf(rebuild) !== Object.prototype)
        failures.push({ kind: "rebuild has a foreign prototype", kase, detail: name });
      for (const tenant of tenantsOf(rebuild)) {
        const claim = tryClaimName(rebuild.claimPath, tenant);
        if (!claim.ok) {
          failures.push({
            kind: `accepted output has no claim name (${claim.reason
              .replace(/ at position \d+/, "")
              .replace(/is \d+ bytes/, "too long")
              .replace(/U\+\w+/, "U+…")})`,
            kase,
            detail: `output ${visible(rebuild.output).slice(0, 80)} → ${visible(rebuild.outputPath).slice(0, 80)}: ${claim.reason}`,
          });
        }
      }
    }
  }
  assert.equal(failures.length, 0, report(failures));
});

test("Object.prototype stays clean after the whole fuzz run", () => {
  assertNoPrototypePollution(prototypeBefore);
  const total = outcomes.reduce((sum, o) => sum + o.ms, 0);
  assert.ok(outcomes.length >= runs * 5, `${outcomes.length} cases`);
  console.log(`# the loader took ${Math.round(total)} ms for ${outcomes.length} documents`);
});
