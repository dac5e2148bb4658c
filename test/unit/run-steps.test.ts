/**
 * A run record's steps in its hash (lib/runs/records.ts `encodeSteps` / `decodeSteps`): the
 * packed form reads back exactly, is a fraction of the JSON's size (a record of ten steps
 * stays a listpack in Redis), steps it cannot carry exactly are written as JSON, and the JSON of
 * records written before it is still read.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { decodeSteps, encodeSteps, fromFields, toFields } from "../../lib/runs/records";
import type { StepRecord } from "../../lib/runs/types";

const T = 1_796_244_013_849;
const steps: StepRecord[] = [
  { name: "prepare", status: "done", startedAt: T, finishedAt: T + 200 },
  { name: "tile_z0-9.x", status: "failed", startedAt: T + 200, finishedAt: T + 1_004 },
  { name: "late", status: "aborted", startedAt: T - 5, finishedAt: null },
  { name: "work", status: "running", startedAt: T + 1_004, finishedAt: null },
];

test("packed steps read back exactly: every status, a running step, a step that started before the first", () => {
  const packed = encodeSteps(steps);
  assert.equal(packed, `${T}|prepare:d:0:200,tile_z0-9.x:f:200:804,late:a:-5:,work:r:1004:`);
  assert.deepEqual(decodeSteps(packed), steps);
  assert.ok(
    packed.length * 3 < JSON.stringify(steps).length,
    `${packed.length} against ${JSON.stringify(steps).length}`,
  );
});

test("ten steps of minute-long runs stay under the embedded Redis's 256-byte listpack value", () => {
  const many = Array.from({ length: 10 }, (_, i): StepRecord => ({
    name: `step-${i}`,
    status: "done",
    startedAt: T + i * 61_000,
    finishedAt: T + i * 61_000 + 60_500,
  }));
  assert.ok(encodeSteps(many).length <= 256, encodeSteps(many));
  assert.ok(JSON.stringify(many).length > 256);
  assert.deepEqual(decodeSteps(encodeSteps(many)), many);
});

test("steps the packed form cannot carry exactly are JSON, and read back", () => {
  for (const odd of [
    [{ name: "has space", status: "done", startedAt: T, finishedAt: T + 1 }],
    [{ name: "a:b", status: "done", startedAt: T, finishedAt: T + 1 }],
    [{ name: "frac", status: "done", startedAt: T + 0.5, finishedAt: T + 1 }],
    [{ name: "backwards", status: "done", startedAt: T, finishedAt: T - 1 }],
    [{ name: "long", status: "done", startedAt: 0, finishedAt: 9e15 }],
    [
      { name: "first", status: "done", startedAt: 0, finishedAt: 1 },
      { name: "far", status: "done", startedAt: 2e15, finishedAt: 2e15 + 1 },
    ],
    [{ name: "odd-status", status: "toString", startedAt: T, finishedAt: T + 1 }],
  ] as StepRecord[][]) {
    const written = encodeSteps(odd);
    assert.ok(written.startsWith("["), written);
    assert.deepEqual(decodeSteps(written), odd);
  }
});

test("no steps: an empty field; older records' JSON is read; a field that cannot be read is no steps", () => {
  assert.equal(encodeSteps([]), "");
  assert.deepEqual(decodeSteps(""), []);
  assert.deepEqual(decodeSteps(undefined), []);
  assert.deepEqual(decodeSteps(JSON.stringify(steps)), steps);
  for (const broken of ["[{", "{}", "x|a:d:0:1", `${T}|`, `${T}|a:z:0:1`, `${T}|a:d:0:1,`, "|a:d:0:1"]) {
    assert.deepEqual(decodeSteps(broken), [], broken);
  }
});

test("a record's fields carry its steps packed, and back", () => {
  const fields = toFields({ id: "run-x-a1", steps });
  assert.equal(fields.steps, encodeSteps(steps));
  assert.deepEqual(fromFields(fields)?.steps, steps);
});
