import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { loadDefinitions, parseDefinitions, PLACEHOLDER_NAMES } from "../../lib/rebuilds/definitions";
import { formatDuration, parseDuration } from "../../lib/rebuilds/duration";
import { cappedBackoff, scheduledTickOf } from "../../lib/rebuilds/queue";
import { expandPlaceholders, type StepContext } from "../../lib/rebuilds/steps/context";
import { renderSchema, SCHEMA_FILE } from "../../scripts/generate-schema";
import { prepareExampleData } from "../../scripts/examples/parcels";

const step = { name: "noop", run: ["true"] };
const base = { output: "out", steps: [step] };

function rejection(rebuilds: Record<string, unknown>, extra: Record<string, unknown> = {}): string {
  const result = parseDefinitions({ rebuilds, ...extra }, "/srv/claimwatch.yaml");
  assert.equal(result.ok, false, "expected a rejection");
  return result.ok ? "" : result.error.message;
}

test("durations: units, compounds, and what is not a duration", () => {
  assert.equal(parseDuration("500ms"), 500);
  assert.equal(parseDuration("90s"), 90_000);
  assert.equal(parseDuration("1h30m"), 5_400_000);
  assert.equal(parseDuration("1d"), 86_400_000);
  for (const bad of ["", "90", "1.5h", "ninety", "0s", "-5s", "5 s", "5S"])
    assert.equal(parseDuration(bad), undefined, bad);
  assert.equal(formatDuration(90_000), "90s");
});

test("the shipped claimwatch.yaml is valid and its defaults are applied", () => {
  const result = loadDefinitions("claimwatch.yaml");
  assert.ok(result.ok, result.ok ? "" : result.error.message);
  const parcels = result.definitions.rebuilds.get("parcels")!;
  assert.equal(parcels.claim.ttl, 90_000);
  assert.equal(parcels.timeLimit, 7_200_000);
  assert.deepEqual(result.definitions.rebuilds.get("incidents")!.tenants, ["acme", "globex"]);
  assert.equal(result.definitions.retention.runs, 10_000);
});

test("each rejection names the path and the problem", () => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ p: { ...base, timeLimit: "90s" } }, /^claimwatch\.yaml: rebuilds\.p\.timeLimit: must be longer than claim\.ttl/],
    [
      { p: { ...base, claim: { ttl: "10s", refreshEvery: "6s" } } },
      /rebuilds\.p\.claim\.refreshEvery: must be at most half/,
    ],
    [{ p: { ...base, extra: true } }, /rebuilds\.p: unknown key 'extra'$/],
    [
      { p: { ...base, retries: { backoff: "30m", maxBackoff: "10m" } } },
      /rebuilds\.p\.retries\.backoff: must be at most retries\.maxBackoff \(10m\)/,
    ],
    [
      { p: { ...base, retries: { backoff: "20m" } } },
      /rebuilds\.p\.retries\.backoff: must be at most retries\.maxBackoff \(10m\)/,
    ],
    [{ p: { ...base, claim: { ttl: "soon" } } }, /rebuilds\.p\.claim\.ttl: must be a duration/],
    [
      { p: { ...base, claim: { ttl: 90 } } },
      /rebuilds\.p\.claim\.ttl: must be a duration like .* \(a number alone has no unit: write 90s or 90ms\)$/,
    ],
    [{ p: { ...base, claim: { ttl: "0s" } } }, /rebuilds\.p\.claim\.ttl: must be longer than 0 \(e\.g\. 1s\)$/],
    [{ p: { ...base, idempotency: { ttl: "0m0s" } } }, /rebuilds\.p\.idempotency\.ttl: must be longer than 0/],
    [
      { p: { ...base, idempotency: { ttl: "99999999999999999d" } } },
      /rebuilds\.p\.idempotency\.ttl: is too long \(at most 9007199254740991ms\)$/,
    ],
    [{ p: { ...base, timeLimit: "30d" } }, /rebuilds\.p\.timeLimit: must be at most 24d \(a timer limit\)/],
    // Past what a number holds exactly: still the timer's limit, not 2^53 ms (helper-102).
    [
      { p: { ...base, claim: { ttl: "99999999999999999999s" } } },
      /rebuilds\.p\.claim\.ttl: must be at most 24d \(a timer limit\)$/,
    ],
    [{ p: base, q: base }, /rebuilds\.q\.output: is also the output of rebuild 'p'/],
    [{ p: base, q: { ...base, output: "out/inner" } }, /rebuilds\.q\.output: is nested with the output of rebuild 'p'/],
    [{ p: { ...base, schedule: { cron: "0 25 * * *" } } }, /rebuilds\.p\.schedule\.cron: is not a cron expression/],
    // A step past its field's range ticks once at its start, not as written (black-box helper-147).
    [
      { p: { ...base, schedule: { cron: "*/61 * * * *" } } },
      /rebuilds\.p\.schedule\.cron: step \/61 in the minute field is not less than its range \(0-59\)/,
    ],
    [{ p: { ...base, schedule: { cron: "0 */25 * * *" } } }, /step \/25 in the hour field .*\(0-23\)/],
    [{ p: { ...base, schedule: { cron: "0 0 1-31/40 * *" } } }, /step \/40 in the day-of-month field/],
    [{ p: { ...base, schedule: { cron: "*/90 * * * * *" } } }, /step \/90 in the second field/],
    [
      { p: { ...base, schedule: { cron: "0 2 * * *", tz: "Mars/Olympus" } } },
      /rebuilds\.p\.schedule\.tz: must be an IANA time zone/,
    ],
    [{ p: { ...base, steps: [{ name: "x", run: [] }] } }, /rebuilds\.p\.steps\[0\]/],
    [{ p: { ...base, steps: [] } }, /rebuilds\.p\.steps: must list at least one step/],
    [{ p: { steps: base.steps } }, /rebuilds\.p\.output: is required \(a string\)/],
    [{ p: { ...base, tenants: ["a", "a"] } }, /rebuilds\.p\.tenants: lists a tenant twice/],
    [{ p: { ...base, tenants: ["../etc"] } }, /rebuilds\.p\.tenants\[0\]: a tenant name must be/],
    [{ "bad name": base }, /rebuilds\.bad name: invalid name/],
  ];
  for (const [rebuilds, expected] of cases) assert.match(rejection(rebuilds), expected);
  assert.match(rejection({ p: base }, { retention: { runs: 1 } }), /retention\.runs/);
  assert.match(rejection({ p: base }, { unknown: 1 }), /unknown key 'unknown'/);
});

/** Writes `text` as a definitions file in a fresh temp dir and loads it. */
function loadText(text: string, name = "claimwatch.yaml") {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-defs-"));
  try {
    fs.writeFileSync(path.join(dir, name), text);
    return loadDefinitions(path.join(dir, name));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

function refusal(result: ReturnType<typeof loadDefinitions>): string {
  assert.equal(result.ok, false, "expected a refusal");
  return result.ok ? "" : result.error.message;
}

test("a missing file names where it looked and why", () => {
  const byDefault = refusal(loadDefinitions("/nonexistent/claimwatch.yaml", { from: "default", cwd: "/nonexistent" }));
  assert.match(byDefault, /^\/nonexistent\/claimwatch\.yaml: file not found/);
  assert.match(
    byDefault,
    /CLAIMWATCH_CONFIG is not set, so \.\/claimwatch\.yaml in the working directory \/nonexistent is used/,
  );
  const named = refusal(
    loadDefinitions("/etc/cw/defs.yaml", { from: "CLAIMWATCH_CONFIG", value: "/etc/cw/defs.yaml" }),
  );
  assert.match(named, /^\/etc\/cw\/defs\.yaml: file not found \(CLAIMWATCH_CONFIG=\/etc\/cw\/defs\.yaml names it/);
  assert.match(refusal(loadDefinitions(os.tmpdir())), /is a directory/);
});

test("a YAML syntax error points at the line to fix, shows it, and has no dangling colon", () => {
  const cases: [string, number, string][] = [
    // yaml reports an unclosed bracket at the end of the file: the line that opened it is meant.
    ["rebuilds:\n  p: [unclosed\n\n", 2, "  p: [unclosed"],
    ["rebuilds:\n  p: {output: out\n  q: 1\n", 2, "  p: {output: out"],
    ["rebuilds:\n  p:\n    output: out\n    claim: ttl: 5s\n", 4, "    claim: ttl: 5s"],
    ['rebuilds:\n  p:\n    output: "out\n', 3, '    output: "out'],
    // An unclosed quote swallows the lines below it: yaml reports where the file ends, the quote is meant.
    ['rebuilds:\n  p:\n    output: "out\n    steps: []\n  q:\n    output: x\n', 3, '    output: "out'],
    ["rebuilds:\n  p:\n    steps:\n      - name: 'a\n        run: [x]\n", 4, "      - name: 'a"],
    ["rebuilds:\n\tp: {}\n", 2, "\\u0009p: {}"],
  ];
  for (const [text, line, shown] of cases) {
    const message = refusal(loadText(text));
    const [head, excerpt, caret] = message.split("\n");
    assert.match(head!, new RegExp(`^claimwatch\\.yaml:${line}: is not valid YAML: \\S`), message);
    assert.doesNotMatch(head!, /:\s*$/, "no dangling colon");
    assert.doesNotMatch(head!, /at line \d+/, "the line is said once, up front");
    assert.equal(excerpt, `    ${line} | ${shown}`, message);
    assert.match(caret!, /^ +\^$/, message);
  }
});

test("every problem of a file is reported in one run, each with its line", () => {
  const text = [
    "rebuilds:", //                                   1
    "  p:", //                                        2
    "    output: out/p", //                           3
    "    claim: { ttl: soon }", //                    4
    "    steps: []", //                               5
    "  q:", //                                        6
    "    output: out/q", //                           7
    "    colour: red", //                             8
    "    steps: [{ name: s, run: [x] }]", //          9
    "retention: { runs: 1 }", //                      10
  ].join("\n");
  const result = loadText(text);
  assert.ok(!result.ok);
  assert.deepEqual(
    result.error.problems.map((p) => [p.line, p.where]),
    [
      [4, "rebuilds.p.claim.ttl"],
      [5, "rebuilds.p.steps"],
      [8, "rebuilds.q"],
      [10, "retention.runs"],
    ],
  );
  assert.deepEqual(
    result.error.message.split("\n").map((line) => line.slice(0, line.indexOf(": "))),
    ["claimwatch.yaml:4", "claimwatch.yaml:5", "claimwatch.yaml:8", "claimwatch.yaml:10"],
  );
  // A rule across fields (timeLimit against claim.ttl, refreshEvery against it) is checked even
  // when another field of the same rebuild is wrong (helper-131: it waited for the next start).
  const crossed = loadText(
    [
      "rebuilds:", //                                                                1
      "  a:", //                                                                     2
      "    output: out/a", //                                                        3
      "    claim: { ttl: 10s, refreshEvery: 9s }", //                                4
      "    steps: [{ name: s, run: [x], limits: { memory: lots, pids: -1 } }]", //   5
      "  b:", //                                                                     6
      "    output: out/b", //                                                        7
      "    claim: { ttl: 10s }", //                                                  8
      "    timeLimit: 5s", //                                                        9
      "    steps: [{ name: s, run: [x], limits: { memory: 1KiB } }, { name: t, run: [y] }, { name: t, run: [z] }]", // 10
      "  c:", //                                                                     11
      "    output: out/c", //                                                        12
      "    claim: { ttl: 10s, refresh_every: 4s }", //                               13
      "    steps: [{ name: s, run: [x] }]", //                                       14
    ].join("\n"),
  );
  assert.ok(!crossed.ok);
  assert.deepEqual(crossed.error.problems.map((p) => p.where).sort(), [
    "rebuilds.a.claim.refreshEvery",
    "rebuilds.a.steps[0].limits.memory",
    "rebuilds.a.steps[0].limits.pids",
    "rebuilds.b.claim.refreshEvery", // its default (30s) is over half the ttl written
    "rebuilds.b.steps",
    "rebuilds.b.steps[0].limits.memory",
    "rebuilds.b.timeLimit",
    // Only the misspelt key: not also its default (30s) judged against the ttl (review helper-132).
    "rebuilds.c.claim",
  ]);
  // Problems found after the schema (shared outputs) are all reported too.
  const shared = loadText(
    "rebuilds:\n  a: { output: o, steps: [{ name: s, run: [x] }] }\n  b: { output: o, steps: [{ name: s, run: [x] }] }\n  c: { output: o, steps: [{ name: s, run: [x] }] }\n",
  );
  assert.ok(!shared.ok);
  assert.deepEqual(
    shared.error.problems.map((p) => `${p.line} ${p.where}`),
    ["3 rebuilds.b.output", "4 rebuilds.c.output"],
  );
});

test("no rebuilds is refused, saying how to add one", () => {
  assert.match(
    refusal(loadText("rebuilds: {}\n")),
    /^claimwatch\.yaml:1: rebuilds: is empty: add at least one rebuild under 'rebuilds:' \(e\.g\. .*output: .*steps: /,
  );
  assert.match(refusal(loadText("# nothing yet\n")), /^claimwatch\.yaml: rebuilds: is missing: .*at least one rebuild/);
  assert.match(rejection({}), /rebuilds: is empty/);
});

test("the process edge prints each problem on its own prefixed line, then exits 2", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-defs-"));
  try {
    const file = path.join(dir, "claimwatch.yaml");
    fs.writeFileSync(file, "rebuilds:\n  p: { output: o, steps: [] }\n  q: { output: o2, steps: [], extra: 1 }\n");
    const result = spawnSync(process.execPath, ["bin/claimwatch.mjs", "verify", "p"], {
      env: { ...process.env, CLAIMWATCH_CONFIG: file, CLAIMWATCH_DATA_DIR: path.join(dir, ".data") },
      encoding: "utf8",
      timeout: 30_000,
    });
    assert.equal(result.status, 2, result.stderr);
    assert.deepEqual(result.stderr.trim().split("\n"), [
      "claimwatch: definitions error: claimwatch.yaml:2: rebuilds.p.steps: must list at least one step",
      "claimwatch: definitions error: claimwatch.yaml:3: rebuilds.q.steps: must list at least one step",
      "claimwatch: definitions error: claimwatch.yaml:3: rebuilds.q: unknown key 'extra'",
    ]);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("prestart writes the example parcels only for definitions that read them", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-prestart-"));
  try {
    const file = path.join(dir, "data", "sources", "parcels.geojson");
    const load = (rebuilds: Record<string, unknown>) => {
      const parsed = parseDefinitions({ rebuilds }, path.join(dir, "claimwatch.yaml"));
      assert.ok(parsed.ok, parsed.ok ? "" : parsed.error.message);
      return parsed.definitions;
    };
    const other = load({ other: { output: "out", inputs: ["data/sources/other.csv"], steps: [step] } });
    assert.equal(prepareExampleData(other, file), "not-needed");
    assert.equal(fs.existsSync(path.join(dir, "data")), false, "nothing written for definitions that do not read it");
    const tiles = load({
      parcels: { output: "out", steps: [{ name: "t", tiles: { input: "data/sources/parcels.geojson", layer: "p" } }] },
    });
    assert.equal(prepareExampleData(tiles, file), "written");
    const written = fs.statSync(file);
    assert.ok(written.size > 1_000_000);
    assert.equal(prepareExampleData(tiles, file), "present");
    assert.equal(fs.statSync(file).mtimeMs, written.mtimeMs, "an existing file is not rewritten");
    const asInput = load({ p: { output: "out", inputs: ["data/sources/parcels.geojson"], steps: [step] } });
    assert.equal(prepareExampleData(asInput, file), "present");
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("retry backoff doubles from the configured delay and stops at the cap", () => {
  assert.deepEqual(
    [1, 2, 3, 4, 5, 6].map((n) => cappedBackoff(n, 30_000, 600_000)),
    [30_000, 60_000, 120_000, 240_000, 480_000, 600_000],
  );
});

test("scheduler job ids carry the tick time", () => {
  assert.deepEqual(scheduledTickOf("repeat:sched.parcels:1764468000000"), {
    schedulerId: "sched.parcels",
    tickAt: 1764468000000,
  });
  assert.equal(scheduledTickOf("run-123"), null);
});

test("claimwatch.schema.json is generated from the current schema (npm run schema)", () => {
  assert.equal(fs.readFileSync(SCHEMA_FILE, "utf8"), renderSchema());
});

test("step limits: sizes in binary units, pids, and clear rejections", () => {
  const parsed = parseDefinitions(
    { rebuilds: { p: { ...base, steps: [{ ...step, limits: { memory: "512MiB", pids: 64 } }] } } },
    "/srv/claimwatch.yaml",
  );
  assert.ok(parsed.ok, parsed.ok ? "" : parsed.error.message);
  const runStep = parsed.definitions.rebuilds.get("p")!.steps[0]!;
  assert.ok("run" in runStep);
  assert.deepEqual(runStep.limits, { memory: 512 * 1024 ** 2, pids: 64 });
  for (const [memory, bytes] of [
    ["1G", 1024 ** 3],
    ["64Mi", 64 * 1024 ** 2],
    [8388608, 8388608],
  ] as const) {
    const ok = parseDefinitions({ rebuilds: { p: { ...base, steps: [{ ...step, limits: { memory } }] } } }, "/c.yaml");
    assert.ok(ok.ok && "run" in ok.definitions.rebuilds.get("p")!.steps[0]!);
    assert.equal(
      ok.ok && (ok.definitions.rebuilds.get("p")!.steps[0] as { limits: { memory: number } }).limits.memory,
      bytes,
    );
  }
  assert.match(
    rejection({ p: { ...base, steps: [{ ...step, limits: { memory: "lots" } }] } }),
    /rebuilds\.p\.steps\[0\]\.limits\.memory: must be a size like 512MiB/,
  );
  assert.match(
    rejection({ p: { ...base, steps: [{ ...step, limits: { memory: "1K" } }] } }),
    /limits\.memory: must be at least 4MiB/,
  );
  assert.match(
    rejection({ p: { ...base, steps: [{ ...step, limits: { pids: 2 } }] } }),
    /limits\.pids: must be at least 8/,
  );
  assert.match(rejection({ p: { ...base, steps: [{ ...step, limits: { cpu: 1 } }] } }), /unknown key 'cpu'/);
});

test("the worker's shutdown wait follows the longest killGrace", async () => {
  const { shutdownWaitMs } = await import("../../lib/rebuilds/definitions");
  const parsed = parseDefinitions(
    { rebuilds: { a: { ...base, steps: [{ ...step, killGrace: "20s" }] }, b: { ...base, output: "out2" } } },
    "/srv/claimwatch.yaml",
  );
  assert.ok(parsed.ok);
  assert.ok(shutdownWaitMs(parsed.definitions) > 20_000);
});

test("text nested too deep for the YAML parser is refused before it parses, at the line that goes too deep", () => {
  // Thousands of "[" overflowed yaml's stack; inside V8's regexp compiler that is a fatal
  // "out of memory", not an exception (fuzz-definitions, FUZZ_SEED=2594349091).
  assert.match(
    refusal(loadText(`rebuilds:\n  a:\n    x: ${"[".repeat(10_000)}`)),
    /:3: nests \[ \] and \{ \} more than 64 levels deep/,
  );
  assert.match(refusal(loadText(`a:\n${" ".repeat(600)}b: 1\n`)), /:2: is indented more than 512 columns/);
  assert.match(refusal(loadText(`# ${"x".repeat(3 * 1024 * 1024)}\n`)), /is 3145731 bytes; the limit is 2097152/);
  // Brackets in quoted scalars and comments are text; an apostrophe in a plain word opens no quote.
  const fine = loadText(
    `rebuilds:\n  a: # ${"[".repeat(100)}\n    output: out\n    steps: [{name: s, run: [sh, -c, '${"[".repeat(100)}']}]\n    description: don't\n`,
  );
  assert.doesNotMatch(fine.ok ? "" : refusal(fine), /levels deep/);
  assert.match(
    refusal(loadText(`note: don't\nx: ${"[".repeat(65)}${"]".repeat(65)}\n`)),
    /:2: nests .* more than 64 levels deep/,
  );
});

test("the 2 MiB limit counts bytes: 1.5 M two-byte characters in a comment are refused, saying how many bytes", () => {
  const valid = "rebuilds:\n  a: { output: out, steps: [{ name: s, run: [x] }] }\n";
  const text = `${valid}# ${"é".repeat(1_500_000)}\n`;
  assert.ok(text.length < 2_097_152, "fewer characters than the limit");
  const bytes = Buffer.byteLength(text);
  assert.equal(refusal(loadText(text)), `claimwatch.yaml: is ${bytes} bytes; the limit is 2097152 (2 MiB)`);
  // 2 MiB exactly is fine.
  const room = 2_097_152 - Buffer.byteLength(valid) - 3;
  const atLimit = `${valid}# ${"é".repeat(Math.floor(room / 2))}${"x".repeat(room % 2)}\n`;
  assert.equal(Buffer.byteLength(atLimit), 2_097_152);
  const accepted = loadText(atLimit);
  assert.ok(accepted.ok, accepted.ok ? "" : accepted.error.message);
  assert.match(refusal(loadText(`${atLimit}x`)), /: is 2097153 bytes; the limit is 2097152 \(2 MiB\)$/);
});

test("a bad time zone is the only problem of a good cron; a bad cron is still reported on its own", () => {
  const problems = (schedule: unknown) => {
    const result = parseDefinitions({ rebuilds: { p: { ...base, schedule } } }, "/srv/claimwatch.yaml");
    assert.ok(!result.ok);
    return result.error.problems.map((p) => `${p.where}: ${p.problem}`);
  };
  assert.deepEqual(problems({ cron: "0 2 * * *", tz: "Mars/Olympus" }), [
    "rebuilds.p.schedule.tz: must be an IANA time zone such as Europe/Berlin or UTC",
  ]);
  const both = problems({ cron: "0 25 * * *", tz: "Mars/Olympus" });
  assert.equal(both.length, 2, both.join("\n"));
  assert.match(both[0]!, /^rebuilds\.p\.schedule\.tz: must be an IANA time zone/);
  assert.match(both[1]!, /^rebuilds\.p\.schedule\.cron: is not a cron expression: .*25/);
  assert.doesNotMatch(both.join("\n"), /Invalid Date/);
});

/** The step `fields` of rebuild p, validated. */
function withStep(fields: Record<string, unknown>) {
  return parseDefinitions({ rebuilds: { p: { ...base, steps: [{ name: "s", ...fields }] } } }, "/srv/claimwatch.yaml");
}

test("an unknown placeholder meant for claimwatch (a misspelt one, a word of claimwatch's) in run, env or cwd is refused, naming the step's path and the known ones", () => {
  const known = "{work} {output} {version} {tenant} {rebuild}";
  const cases: [Record<string, unknown>, string, string, string][] = [
    [{ run: ["tar", "-czf", "{wrk}/out.tgz"] }, "rebuilds.p.steps[0].run[2]", "{wrk}", " (did you mean {work}?)"],
    [
      { run: ["sh", "-c", "cp a {output}/{Version}.txt"] },
      "rebuilds.p.steps[0].run[2]",
      "{Version}",
      " (did you mean {version}?)",
    ],
    [{ run: ["x"], env: { OUT: "{out}" } }, "rebuilds.p.steps[0].env.OUT", "{out}", " (did you mean {output}?)"],
    [{ run: ["x"], cwd: "{work_dir}" }, "rebuilds.p.steps[0].cwd", "{work_dir}", " (did you mean {work}?)"],
    [{ run: ["x", "{tenat}"] }, "rebuilds.p.steps[0].run[1]", "{tenat}", " (did you mean {tenant}?)"],
    [
      { run: ["x", "--fence={fence}"] },
      "rebuilds.p.steps[0].run[1]",
      "{fence}",
      " (not a placeholder: a step reads it from $CLAIMWATCH_FENCE)",
    ],
    [{ run: ["x", "{wokr}/a"] }, "rebuilds.p.steps[0].run[1]", "{wokr}", " (did you mean {work}?)"],
    [
      { run: ["x", "{runId}"] },
      "rebuilds.p.steps[0].run[1]",
      "{runId}",
      " (not a placeholder: a step reads it from $CLAIMWATCH_RUN_ID)",
    ],
    [{ run: ["x", "{job}"] }, "rebuilds.p.steps[0].run[1]", "{job}", ""],
  ];
  for (const [fields, where, token, suggestion] of cases) {
    const result = withStep(fields);
    assert.ok(!result.ok, `${JSON.stringify(fields)} was accepted`);
    assert.equal(result.error.problems.length, 1, result.error.message);
    assert.equal(result.error.where, where);
    assert.ok(
      result.error.problem.startsWith(`unknown placeholder ${token}${suggestion}; the placeholders are ${known}`),
      result.error.message,
    );
  }
});

test("braces that are the program's own syntax are left to it", () => {
  const fine = [
    ["sh", "-c", 'echo "${HOME}" ${PATH:-x} {a,b} {1..3} {} {.}; find . -exec echo {} \\;'],
    ["awk", "{print $1}", "{ print }", "/x/{ next }", "{print}", "/x/{next}"],
    ["jq", "{name, id}", ".[] | {name}", "{id}"],
    ["sed", "/x/{d}", "/y/{p;q}"],
    ["curl", "-w", "%{http_code}"],
    ["git", "rev-parse", "@{upstream}", "HEAD@{1}"],
    ["grep", "-P", "\\p{Lu}\\x{e9}", "a{2,3}"],
    ["ruby", "-e", 'puts "#{x}"'],
    ["echo", "{work}{output}{version}{rebuild}", "{{work}}"],
  ];
  for (const run of fine) {
    const result = withStep({ run, env: { A: "${B}" }, cwd: "{work}/x" });
    assert.ok(result.ok, result.ok ? "" : result.error.message);
  }
});

test("the placeholders validation knows are exactly the ones substitution replaces", () => {
  const context = {
    workDir: "/w",
    outputDir: "/o",
    version: "v1",
    tenant: "acme",
    rebuild: "p",
  } as StepContext;
  for (const name of PLACEHOLDER_NAMES) assert.notEqual(expandPlaceholders(`{${name}}`, context), `{${name}}`, name);
  for (const other of ["wrk", "Work", "runId", "fence", "base"]) {
    assert.equal(expandPlaceholders(`{${other}}`, context), `{${other}}`, other);
    assert.ok(!withStep({ run: [`{${other}}`] }).ok, other);
  }
});

test("a step that says its kind gets that kind's error, and each of its problems", () => {
  const unknownKey = withStep({ run: ["x"], colour: "red" });
  assert.ok(!unknownKey.ok);
  assert.deepEqual(
    unknownKey.error.problems.map((p) => `${p.where}: ${p.problem}`),
    ["rebuilds.p.steps[0]: unknown key 'colour'"],
  );
  const two = withStep({ run: "make", killGrace: "soon", limits: { pids: 1 } });
  assert.ok(!two.ok);
  assert.deepEqual(
    two.error.problems.map((p) => p.where),
    ["rebuilds.p.steps[0].run", "rebuilds.p.steps[0].killGrace", "rebuilds.p.steps[0].limits.pids"],
  );
  const neither = withStep({});
  assert.ok(!neither.ok);
  assert.match(neither.error.message, /steps\[0\]: a step needs a name and exactly one of `run`/);
  const both = withStep({ run: ["x"], tiles: { input: "a.geojson", layer: "l" } });
  assert.ok(!both.ok);
  assert.match(both.error.message, /steps\[0\]: a step needs a name and exactly one of `run`/);
});

test("a misspelt required key is one problem that names the key it was meant as", () => {
  const { output, ...withoutOutput } = base as { output: string } & Record<string, unknown>;
  const { steps, ...withoutSteps } = base as { steps: unknown } & Record<string, unknown>;
  for (const [rebuild, line] of [
    [
      { ...withoutOutput, outptu: output },
      "claimwatch.yaml: rebuilds.p: unknown key 'outptu' (did you mean 'output'?)",
    ],
    [{ ...withoutSteps, stpes: steps }, "claimwatch.yaml: rebuilds.p: unknown key 'stpes' (did you mean 'steps'?)"],
  ] as const) {
    const result = parseDefinitions({ rebuilds: { p: rebuild } }, "/srv/claimwatch.yaml");
    assert.ok(!result.ok);
    assert.equal(result.error.message, line);
  }
});

test("a file that is not a mapping (a binary file read as text, a list) says what the file must be", () => {
  for (const [raw, shape] of [
    ["\u0000\u0001binary", "a string"],
    [[1, 2], "a list"],
  ] as const) {
    const result = parseDefinitions(raw, "/srv/claimwatch.yaml");
    assert.ok(!result.ok);
    assert.equal(
      result.error.message,
      `claimwatch.yaml: must be a YAML mapping with a 'rebuilds:' section, not ${shape}`,
    );
  }
});

test("{tenant} in a rebuild without tenants is refused (it would be empty), and accepted in one with tenants", () => {
  const refused = withStep({ run: ["echo", "{tenant}"] });
  assert.ok(!refused.ok);
  assert.equal(
    refused.error.message,
    "claimwatch.yaml: rebuilds.p.steps[0]: uses {tenant}, but this rebuild has no tenants (it would be empty): list them under tenants, or leave it out",
  );
  const tenanted = parseDefinitions(
    { rebuilds: { p: { ...base, tenants: ["acme"], steps: [{ name: "s", run: ["echo", "{tenant}"] }] } } },
    "/srv/claimwatch.yaml",
  );
  assert.ok(tenanted.ok, tenanted.ok ? "" : tenanted.error.message);
});

test("an alert rule's duration given as a bare number says it has no unit, as a rebuild's does (black-box helper-120)", () => {
  const parsed = parseDefinitions(
    {
      rebuilds: { p: { output: "out/p", steps: [{ name: "s", run: ["true"] }] } },
      alerts: { rules: { claimStale: { for: 10 } } },
    },
    "/srv/claimwatch.yaml",
  );
  assert.equal(parsed.ok, false);
  assert.match(
    parsed.ok ? "" : parsed.error.message,
    /alerts\.rules\.claimStale\.for: must be a duration like .* \(a number alone has no unit: write 10s or 10ms\)$/,
  );
});
