/**
 * The Prometheus text format as lib/metrics/exposition writes it: HELP/TYPE, label escaping,
 * values, set/inc samples before appended ones, and appended lines in order across the chunks
 * they are joined in.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { Exposition, labelPair } from "../../lib/metrics/exposition";

test("families in order, a blank line between them, one trailing newline", () => {
  const exposition = new Exposition();
  exposition.family("a_total", "Counts a.", "counter").inc("", 2);
  exposition.family("b", "Help with \\ and\nnewline.", "gauge").set(labelPair("x", 'q"uo\\te\n'), 1.5);
  assert.equal(
    exposition.format(),
    [
      "# HELP a_total Counts a.",
      "# TYPE a_total counter",
      "a_total 2",
      "",
      "# HELP b Help with \\\\ and\\nnewline.",
      "# TYPE b gauge",
      'b{x="q\\"uo\\\\te\\n"} 1.5',
      "",
    ].join("\n"),
  );
});

test("appended samples follow the set/inc ones, every line once and in order, past many chunks", () => {
  const exposition = new Exposition();
  const family = exposition.family("t_seconds", "T.", "gauge");
  const count = 2_345; // several of the chunks appended lines are joined in, and a partial one
  for (let i = 0; i < count; i++) family.append(labelPair("i", String(i)), i / 4, i % 2 ? "_x" : "");
  family.set(labelPair("s", "first"), 0);
  family.inc(labelPair("s", "first"));
  family.set("", Number.POSITIVE_INFINITY);
  const lines = exposition.format().split("\n");
  assert.deepEqual(lines.slice(0, 5), [
    "# HELP t_seconds T.",
    "# TYPE t_seconds gauge",
    't_seconds{s="first"} 1',
    "t_seconds +Inf",
    't_seconds{i="0"} 0',
  ]);
  const appended = lines.slice(4, -1);
  assert.equal(appended.length, count);
  appended.forEach((line, i) => assert.equal(line, `t_seconds${i % 2 ? "_x" : ""}{i="${i}"} ${i / 4}`));
  assert.equal(lines.at(-1), "");
});

test("a counter refuses a decrease and an infinite step", () => {
  const family = new Exposition().family("c_total", "C.", "counter");
  assert.throws(() => family.inc("", -1), /decrease/);
  assert.throws(() => family.inc("", Number.POSITIVE_INFINITY), /not a valid number/);
});
