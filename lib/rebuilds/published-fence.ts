/**
 * The highest fence published for an output, kept on disk beside it, durably. Redis may forget
 * recent writes (RDB-only persistence, AOF `everysec`, an asynchronous replica promoted): its
 * fence counter and published pointer then go back. This record does not: an acquire raises the
 * counter past it before granting (`fenceFloor`), so a fence used for a publish is never granted
 * again, and repair never moves `current` to a pointer older than it.
 *
 * Each recorded fence is its own file, `<output>/.published-fence@<fence>`, holding its build's
 * hash, and the record is the highest of them. A file is written whole (temporary file, fsync),
 * then linked to its name — `link` fails when the name exists, so a fence names one build, and the
 * first writer wins — and the directory is fsynced. Files are never overwritten, so two writers
 * (a publisher and a repair, or a paused publisher and a newer one) cannot put the record back:
 * with one file overwritten by rename, the later rename won even when it carried the lower fence.
 * Lower files are removed after a higher one is on disk (only the highest counts). On a
 * filesystem without hard links the entry is created exclusively (`O_EXCL`) and written in place.
 *
 * The single `.published-fence` file earlier versions read and wrote is still written alongside
 * (only upwards, as they did), so that a worker of an earlier version running beside this one
 * during a rolling deploy raises its grants past what this one published. It is read as one
 * more entry, and never removed.
 *
 * The runs that published here are listed beside the output too, one symlink each (`RUN_PREFIX`):
 * all a job the queue's Redis brings back after its publish (a crash lost its completion) has to
 * find that publish by, with the claims Redis's list lost as well.
 */
import { existsSync } from "node:fs";
import fs from "node:fs/promises";
import path from "node:path";
import { attemptOfRunId, jobPartOf } from "../runs/types";
import { holdingMarksIn } from "./holding-marks";
import { lockCurrent, lockOutputFile } from "./current-lock";
import {
  BUILD_HASH,
  buildDirOf,
  CurrentSwapError,
  ensureBuildsDir,
  namingFile,
  outputTempName,
  pointCurrent,
  syncPath,
} from "./output";

/**
 * A fence about to be used for a publish, marked before the fenced publish: an empty file in
 * `builds/`, made durable by the promote's fsync of `builds/` that comes right after (output.ts),
 * so it costs no fsync of its own. Floor only: it raises grants, never names a build.
 */
const GRANTED_PREFIX = ".granted-fence@";
const GRANTED = /^\.granted-fence@([1-9]\d{0,15})$/;

/**
 * Earlier versions' record: one JSON file, `{"fence":<n>,"hash":"<hash>"}`, replaced by rename.
 * It also keeps `jobs`, "<run id> <version> <mark>" of the last publishes here, newest last, which
 * the previous version listed its runs in; still written with a fence (best effort, for a worker
 * of that version beside this one) and read as more listings, no longer relied on: it was read,
 * changed and renamed over, so two writers at once kept only one's list (review helper-165).
 */
const LEGACY_FILE = ".published-fence";
/** The `jobs` list is cut, oldest first, to keep the file this small (READ_LIMIT reads it whole). */
const JOBS_MAX_BYTES = 2_048;
const ENTRY_PREFIX = ".published-fence@";
const ENTRY = /^\.published-fence@([1-9]\d{0,15})$/;

/**
 * A run listed as having published here: the symlink `.published-run@<fence>@<run id>`, whose
 * target is "<version> <mark or ->" (it names no file; short enough, usually, to be kept in the
 * inode: no block of its own — review helper-169). A symlink is made with its content in one call
 * (`symlink(2)`: no write to sync, no half-written entry after a crash), durable once the
 * directory is fsynced, and never replaced: each run has its own name, so writers at once (a
 * publisher, repair, the sweep, a paused holder) never undo each other's listing. The names fit
 * (`RUN_ID_PATTERN`: 206 characters at most), and a lookup reads only its job's links. A copy of
 * an output must keep symlinks as they are (as `current` needs too).
 */
const RUN_PREFIX = ".published-run@";
const RUN_LINK = /^\.published-run@([1-9]\d{0,15})@([A-Za-z0-9_.-]{1,200}-a\d{1,4})$/;
/** The name of the link listing run `runId` as the publisher of `fence`. */
export function publishedRunLinkName(fence: number, runId: string): string {
  return `${RUN_PREFIX}${fence}@${runId}`;
}

/** Listings kept per output, newest fences first (a job brought back after this many more publishes of its output finds nothing). */
const LISTED_RUNS_KEPT = 128;

export interface PublishedFence {
  fence: number;
  /** The build published with that fence. */
  hash: string;
}

/**
 * The highest fence recorded for `outputDir` and its build, or `null` when none is (nothing
 * published yet, or no directory). An entry whose hash cannot be read still counts with its fence
 * (its name says that fence published), with the hash "" (not a build hash: repair then neither
 * restores the pointer from it nor moves `current`). Throws when the directory cannot be read
 * (other than missing): "nothing published" would let an acquire grant a published fence again.
 */
export async function readPublishedFence(outputDir: string): Promise<PublishedFence | null> {
  for (let listing = 1; ; listing++) {
    let names: string[];
    try {
      names = await fs.readdir(outputDir);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw error;
    }
    const legacy = names.includes(LEGACY_FILE) ? await readLegacy(outputDir) : null;
    const top = fencesIn(names)[0];
    // An entry wins a tie: the first build recorded with a fence is its build.
    if (top === undefined || (legacy && legacy.fence > top))
      return legacy && { fence: legacy.fence, hash: legacy.hash };
    const hash = await readEntryHash(outputDir, top);
    // Gone since the listing: a writer of a higher fence removed it. Listed again.
    if (hash === GONE && listing < 5) continue;
    const known = hash === GONE ? "" : hash;
    // An entry that cannot be read, tied with the legacy file: the legacy file names the build.
    return { fence: top, hash: known === "" && legacy?.fence === top ? legacy.hash : known };
  }
}

/** A publish the output lists: the run that made it, the version it built, the job's mark it saw. */
export interface PublishedRun {
  runId: string;
  version: string;
  /** The job's `askedAgain` token when that run began (null: none). */
  mark: string | null;
}

/**
 * The runs `outputDir` lists as having published there (`RUN_PREFIX` links, and the legacy file's
 * `jobs` an earlier version listed), oldest first: those of job `ofJob` (a run id without its
 * `-a<attempt>`) only, when given, so that only its links are read. Empty when none are listed;
 * what cannot be read is left out (`strict`: it throws).
 */
export async function readPublishedJobs(
  outputDir: string,
  options: { strict?: boolean; ofJob?: string } = {},
): Promise<PublishedRun[]> {
  const lenient = <T>(read: Promise<T>, fallback: T) => (options.strict ? read : read.catch(() => fallback));
  const [legacy, names] = await Promise.all([
    lenient(readLegacy(outputDir), null),
    lenient(
      fs.readdir(outputDir).catch((error: NodeJS.ErrnoException) => {
        if (error.code === "ENOENT") return [] as string[];
        throw error;
      }),
      [] as string[],
    ),
  ]);
  const links = names
    .flatMap((name) => {
      const [, fence, runId] = RUN_LINK.exec(name) ?? [];
      if (!fence || !runId || (options.ofJob !== undefined && jobPartOf(runId) !== options.ofJob)) return [];
      return [{ name, fence: Number(fence), runId }];
    })
    .sort((a, b) => a.fence - b.fence);
  const linked = await Promise.all(
    links.map(async (link) => {
      const target = await lenient(readRunLink(path.join(outputDir, link.name)), null);
      return parsePublishedRuns(target === null ? [] : [`${link.runId} ${target}`]);
    }),
  );
  // (The links are of that job already.)
  const fromLegacy = parsePublishedRuns(legacy?.jobs ?? []).filter(
    (run) => options.ofJob === undefined || jobPartOf(run.runId) === options.ofJob,
  );
  const runs = [...fromLegacy, ...linked.flat()];
  // One publish listed both ways (its legacy line and its link): the link's place, by its fence.
  return runs.filter(
    (run, i) => runs.findLastIndex((other) => publishedRunEntry(other) === publishedRunEntry(run)) === i,
  );
}

/** A listing's target; null when it is gone, or no link is there (something else in its place lists no run). Throws when it cannot be read. */
async function readRunLink(link: string): Promise<string | null> {
  try {
    return await fs.readlink(link);
  } catch (error) {
    if (NO_LINK.has((error as NodeJS.ErrnoException).code ?? "")) return null;
    throw namingFile(link, error);
  }
}

/** A publish as a list entry: "<run id> <version> <mark or ->" (versions and run ids hold no space). */
export function publishedRunEntry(run: PublishedRun): string {
  return `${run.runId} ${run.version} ${run.mark ?? "-"}`;
}

/** List entries (`publishedRunEntry`) read back; malformed ones are left out. */
export function parsePublishedRuns(lines: string[]): PublishedRun[] {
  return lines.flatMap((line) => {
    const [runId, version, mark] = line.split(" ");
    return runId && version ? [{ runId, version, mark: mark && mark !== "-" ? mark : null }] : [];
  });
}

/** `readEntryHash` of an entry removed since it was listed. */
const GONE = null;

/**
 * The fence every new grant must be above: the highest recorded publish; a fence marked granted
 * for a publish whose record the disk then refused (`markFenceGranted`) — that publish is in the
 * claims Redis only, and a Redis that loses it must not hand its fence out again; and the fence of
 * every holder that may still be running steps (holding-marks.ts), which a Redis that forgot its
 * grant must not hand out again either.
 */
export async function readFenceFloor(outputDir: string): Promise<number> {
  // Names are enough (a floor needs no build hash): no entry is opened on the acquire's path.
  const [names, marks] = await Promise.all([
    fs.readdir(outputDir).catch((error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT") return [] as string[];
      throw error;
    }),
    fenceMarks(outputDir),
  ]);
  const legacy = names.includes(LEGACY_FILE) ? await readLegacy(outputDir) : null;
  return Math.max(fencesIn(names)[0] ?? 0, legacy?.fence ?? 0, ...marks.map((mark) => mark.fence));
}

/**
 * Marks `fence` as about to publish for `outputDir`: called before the promote, whose fsync of
 * `builds/` makes the mark durable before the fenced publish. Creates `builds/` if needed (its
 * name synced, as the promote would).
 */
export async function markFenceGranted(outputDir: string, fence: number): Promise<void> {
  const buildsDir = await ensureBuildsDir(outputDir);
  await fs.writeFile(path.join(buildsDir, `${GRANTED_PREFIX}${fence}`), "");
}

/**
 * The fence marks in `builds/`: fences marked granted before a publish, and the holding marks of
 * holders that may be running steps (holding-marks.ts). Both raise every grant above them.
 */
async function fenceMarks(outputDir: string): Promise<{ fence: number; name: string }[]> {
  let names: string[];
  try {
    names = await fs.readdir(path.join(outputDir, "builds"));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw error;
  }
  return [
    ...fencesIn(names, GRANTED).map((fence) => ({ fence, name: `${GRANTED_PREFIX}${fence}` })),
    ...holdingMarksIn(names),
  ];
}

/**
 * The highest fence marked granted or held in `outputDir`'s `builds/` other than `except` (the
 * caller's own grant), or 0: a grant above the published pointer may be a publish under way whose
 * fence record is not on the disk yet (rebuilt-by-now.ts). Throws when `builds/` cannot be read.
 */
export async function highestFenceMark(outputDir: string, except?: number): Promise<number> {
  return Math.max(0, ...(await fenceMarks(outputDir)).map((mark) => mark.fence).filter((fence) => fence !== except));
}

/** The fences named by entries among `names` (`pattern`: published entries or granted marks), highest first. */
function fencesIn(names: string[], pattern = ENTRY): number[] {
  return names
    .map((name) => pattern.exec(name)?.[1])
    .filter((fence): fence is string => fence !== undefined)
    .map(Number)
    .filter(Number.isSafeInteger)
    .sort((a, b) => b - a);
}

/** The entry's build hash; "" when it cannot be read or holds no hash; `GONE` when it is not there. */
async function readEntryHash(outputDir: string, fence: number): Promise<string | typeof GONE> {
  try {
    const hash = (await readSmallFile(path.join(outputDir, `${ENTRY_PREFIX}${fence}`))).trim();
    return BUILD_HASH.test(hash) ? hash : "";
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ENOENT" ? GONE : "";
  }
}

/**
 * The legacy file's record; null when there is none, it does not parse, or a directory is in its
 * place (no worker writes one: it blocks nothing). Throws when it cannot be read (EIO, EMFILE …):
 * an older worker may have recorded a higher fence there, and counting it as absent would lower
 * the floor.
 */
async function readLegacy(outputDir: string): Promise<(PublishedFence & { jobs: string[] }) | null> {
  let text: string;
  try {
    text = await readSmallFile(path.join(outputDir, LEGACY_FILE));
  } catch (error) {
    if (NOT_A_RECORD.has((error as NodeJS.ErrnoException).code ?? "")) return null;
    throw error;
  }
  try {
    const parsed = JSON.parse(text) as Partial<PublishedFence> & { jobs?: unknown };
    if (!Number.isSafeInteger(parsed.fence) || (parsed.fence ?? 0) <= 0) return null;
    if (typeof parsed.hash !== "string" || !BUILD_HASH.test(parsed.hash)) return null;
    const jobs = Array.isArray(parsed.jobs) ? parsed.jobs.filter((job): job is string => typeof job === "string") : [];
    return { fence: parsed.fence!, hash: parsed.hash, jobs };
  } catch {
    return null;
  }
}

const NOT_A_RECORD = new Set(["ENOENT", "EISDIR", "ENOTDIR"]);
/** What `readlink` answers where no listing is: nothing there, or something other than a link. */
const NO_LINK = new Set(["ENOENT", "EINVAL"]);

/**
 * A file of at most `READ_LIMIT` bytes (a longer one is cut, and then fails to parse): open, one
 * read, close — one trip to the thread pool fewer than `readFile`, on every rebuild's path.
 */
async function readSmallFile(file: string): Promise<string> {
  const handle = await fs.open(file, "r");
  try {
    const { bytesRead, buffer } = await handle.read(Buffer.alloc(READ_LIMIT), 0, READ_LIMIT, 0);
    return buffer.toString("utf8", 0, bytesRead);
  } finally {
    await handle.close();
  }
}

/** An entry holds a build hash (32 hex); the legacy file ~60 bytes of JSON. */
const READ_LIMIT = 4_096;

/**
 * A fenced publish whose fence the disk did not take (full, failing): the publish is in the
 * claims Redis only, which may lose it. The attempt is not done: it fails as transient (another
 * attempt publishes again and records its fence), `current` stays, and the version is not marked
 * rebuilt, so the request is not lost with the publish.
 */
export class FenceNotRecordedError extends Error {
  override name = "FenceNotRecordedError";
  constructor(
    message: string,
    /** The build published in Redis: its run record names it (repair may make it current later). */
    readonly buildHash: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/**
 * What `recordPublishedFence` found:
 *   recorded     this fence and build are on disk (now, or already: a repeat)
 *   newer        a higher fence was recorded meanwhile: `current` stays with that newer build
 *   fence-reused this fence is recorded with another build: the claims Redis lost writes and
 *                granted a fence that had published already; the build recorded first keeps
 *                `current`, and this publish counts as not made
 */
export type FenceRecord =
  | { status: "recorded" }
  /** `unlisted`: why this publish's run could not be listed (it is said, not thrown). */
  | { status: "newer"; known: PublishedFence; unlisted?: string }
  | { status: "fence-reused"; known: PublishedFence };

/**
 * Records `fence` as published for `outputDir` with its build (only ever upwards: a lower fence
 * than one recorded is not written) unless a higher one is recorded: called after the fenced
 * publish succeeded and before `current` follows it, and by repair before it moves `current` to
 * a pointer its publisher could not record. Resolves once the record is on disk; throws when the
 * disk does not take it (full, failing). With `published`, the run is listed with it (one fsync
 * of the directory for both), or `RunNotListedError` thrown.
 */
export async function recordPublishedFence(
  outputDir: string,
  fence: number,
  hash: string,
  /** The run that published, its version and mark (`listPublishedRun`), when known. */
  published?: PublishedRun,
): Promise<FenceRecord> {
  const { listed, ...recorded } = await recordFence(outputDir, fence, hash, published);
  if (!published || recorded.status === "fence-reused") return recorded;
  // A publish that did happen is listed whichever way its fence was recorded: by this call, an
  // earlier one, or another writer (review helper-164: a repeat of a record whose listing had
  // failed answered "recorded", its run still unlisted).
  if (recorded.status === "recorded") {
    // (Listed by recordFence: its legacy write carried the line, or carries it in the background.)
    if (!listed) await listPublishedRun(outputDir, { fence, hash }, published);
    return recorded;
  }
  // One a newer fence passed: listed if the disk takes it, else said — not thrown: the attempt
  // failing would build and publish its version again over the newer one (review helper-165).
  const unlisted = await listPublishedRun(outputDir, { fence, hash }, published).then(
    () => null,
    (error: unknown) => (error instanceof Error ? error.message : String(error)),
  );
  return unlisted === null ? recorded : { ...recorded, unlisted };
}

/**
 * A publish whose fence is recorded beside the output, but whose run the output could not list
 * (a full or failing disk): a job that ends on it would leave nothing for a Redis that brings it
 * back to find. The attempt fails as transient; its next one lists the run (it builds nothing).
 */
export class RunNotListedError extends Error {
  override name = "RunNotListedError";
}

/**
 * Lists `run` among the output's publishes, as the publisher of `publish` (its link is named by
 * that fence), durably (the directory fsynced) before it resolves; a run listed already is synced
 * again (its lister's sync may have failed). Throws `RunNotListedError` when the disk does not
 * take it.
 */
export async function listPublishedRun(outputDir: string, publish: PublishedFence, run: PublishedRun): Promise<void> {
  try {
    await linkRun(outputDir, publish.fence, run);
    await syncPath(outputDir);
  } catch (error) {
    throw new RunNotListedError(
      `run ${run.runId} could not be listed as the publisher of fence ${publish.fence} in ${outputDir}: ${(error as Error).message}`,
      { cause: error },
    );
  }
  await listInLegacy(outputDir, publish, run);
}

/**
 * Best effort: `run` in the legacy file's list too, which is all a worker of the previous version
 * reads listings from (review helper-169: a publish only this version's links listed — a paused
 * holder's, repair's, the sweep's — was one such a worker would publish again after a crash of
 * both Redises). The file is read, changed and renamed over, so writers at once may drop each
 * other's lines, or its fence: written again until a read finds both (a few tries).
 */
async function listInLegacy(outputDir: string, publish: PublishedFence, run: PublishedRun): Promise<void> {
  for (let tries = 0; tries < 4; tries++) {
    // Only the line: a fence a caller knows from the claims Redis alone is not raised here (it
    // may be one no entry records; review helper-171).
    const wrote = await writeLegacy(outputDir, 0, publish.hash, run).catch(() => false);
    if (!wrote) return; // listed (or it cannot be written: said nowhere)
    if (
      !(await syncPath(outputDir).then(
        () => true,
        () => false,
      ))
    )
      return;
  }
}

/**
 * The link listing `run` as the publisher of `fence` (not synced: the caller syncs the directory).
 * A link there already that lists this run is its listing, whatever `symlink` answered (a repeat,
 * or a create whose answer was lost); anything else in its place fails the call.
 */
async function linkRun(outputDir: string, fence: number, run: PublishedRun): Promise<void> {
  const entry = `${run.version} ${run.mark ?? "-"}`;
  const link = path.join(outputDir, publishedRunLinkName(fence, run.runId));
  if (!RUN_LINK.test(path.basename(link))) throw new Error(`not a run id that can be listed: ${run.runId}`);
  try {
    await fs.symlink(entry, link);
  } catch (error) {
    const there = await readRunLink(link).catch(() => null);
    if (there === entry) return;
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw namingFile(link, error);
    throw new Error(`${link} is in the way: it lists ${there === null ? "no run" : `"${there}"`}`, { cause: error });
  }
}

/** `recordFence`'s answer: `listed`, the run was listed with the record (its directory synced). */
type FenceWrite = FenceRecord & { listed?: true };

async function recordFence(
  outputDir: string,
  fence: number,
  hash: string,
  published: PublishedRun | undefined,
): Promise<FenceWrite> {
  const known = await readPublishedFence(outputDir);
  if (known && known.fence > fence) return { status: "newer", known };
  const entry = path.join(outputDir, `${ENTRY_PREFIX}${fence}`);
  if (known && known.fence === fence) {
    if (known.hash !== hash) return { status: "fence-reused", known };
    // Recorded by an earlier call (or another writer) whose syncs may have failed: its entry is
    // checked and synced again before this call says "on disk". Recorded in the legacy file alone
    // (a worker of the earlier version): its entry is written below.
    if (await exists(entry)) return confirmEntry(outputDir, fence, hash);
  }
  const temp = outputTempName(outputDir, ".published-fence-writing.");
  try {
    await writeSynced(temp, hash, "w");
    await fs.link(temp, entry).catch(async (error: NodeJS.ErrnoException) => {
      // A filesystem without hard links: the entry is created exclusively and written in place.
      // A reader may meet it empty for a moment (or for good, after a crash mid-write): its
      // fence still counts, with the hash "" (readPublishedFence).
      if (!NO_HARD_LINKS.has(error.code ?? "")) throw error;
      await writeExclusive(entry, hash);
    });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    // Another writer recorded this fence meanwhile: with this build, or (Redis granted it twice)
    // with another, which keeps it; or a higher fence since, which removed it.
    const now = await readPublishedFence(outputDir);
    if (now && now.fence > fence) return { status: "newer", known: now };
    if (now?.fence !== fence) {
      throw new Error(`the published-fence record of ${outputDir} changed under this write`, { cause: error });
    }
    if (now.hash !== hash && now.hash !== "") return { status: "fence-reused", known: now };
    return confirmEntry(outputDir, fence, hash);
  } finally {
    await fs.rm(temp, { force: true }).catch(() => {});
  }
  // The entries are the record of the fence. Its run is listed with it (one fsync of the
  // directory for both); a listing that fails here is tried again by `recordPublishedFence`,
  // which throws if it fails again: a publish by a run that could not be listed is not done
  // (black-box helper-161: a full disk dropped the run from the list, and after a Redis crash its
  // job published its older build again over a newer one). The legacy file, best effort.
  const listed = published
    ? await linkRun(outputDir, fence, published).then(
        () => true as const,
        () => undefined,
      )
    : undefined;
  await writeLegacy(outputDir, fence, hash, listed && published).catch(() => {});
  await syncPath(outputDir);
  // A higher fence recorded while this one was written keeps `current`; lower ones can go.
  const names = await fs.readdir(outputDir);
  if ((fencesIn(names)[0] ?? 0) > fence) {
    const now = await readPublishedFence(outputDir);
    if (now && now.fence > fence) return { status: "newer", known: now };
  }
  // Lower entries, and the marks this record covers, can go: a holder of a lower fence can no
  // longer publish, and the claims Redis granted a higher fence after it. Listings past the
  // newest LISTED_RUNS_KEPT go too.
  const marks = await fenceMarks(outputDir).catch(() => []);
  const oldListings = names
    .flatMap((name) => {
      const listedFence = RUN_LINK.exec(name)?.[1];
      return listedFence ? [{ name, fence: Number(listedFence) }] : [];
    })
    .sort((a, b) => b.fence - a.fence)
    .slice(LISTED_RUNS_KEPT);
  await Promise.all(
    [
      ...fencesIn(names)
        .filter((f) => f < fence)
        .map((f) => path.join(outputDir, `${ENTRY_PREFIX}${f}`)),
      ...marks.filter((mark) => mark.fence <= fence).map((mark) => path.join(outputDir, "builds", mark.name)),
      ...oldListings.map((listing) => path.join(outputDir, listing.name)),
    ].map((file) => fs.rm(file, { force: true }).catch(() => {})),
  );
  return listed ? { status: "recorded", listed } : { status: "recorded" };
}

/**
 * The legacy file, for workers of earlier versions (they read only its fence, and only upwards:
 * it keeps the higher of its fence and `fence`), and the list of the runs that published here
 * (`published` added unless listed). Not written when it would not change (false). Replaced by
 * rename, as they do; synced with the directory by the caller.
 */
async function writeLegacy(outputDir: string, fence: number, hash: string, published?: PublishedRun): Promise<boolean> {
  // This version's writers one at a time (two at once each kept only its own line, or put the
  // fence back: review helper-171). A writer held up inside its write longer than the wait (a
  // paused holder) would put its older list back when it goes on: this write is tried again in
  // the background once it has let go.
  const lock = await lockOutputFile(outputDir, LEGACY_LOCK_FILE, LEGACY_LOCK_WAIT_MS).catch(() => null);
  if (!lock) {
    writeLegacyLater(outputDir, fence, hash, published);
    return false;
  }
  try {
    return await replaceLegacy(outputDir, fence, hash, published ? [published] : []);
  } finally {
    lock.release();
  }
}

/** The lock file of the legacy file's writers (current-lock.ts), and how long one waits for it (best effort: short). */
const LEGACY_LOCK_FILE = ".published-list.lock";
const LEGACY_LOCK_WAIT_MS = 1_000;
/** Background tries of a legacy write whose lock was held (`LATER_WAIT_MS` each): about 2 min. */
const LEGACY_LATER_TRIES = 24;
const LATER_WAIT_MS = 5_000;

/**
 * Legacy writes waiting in the background, one per output: the highest fence and every line asked
 * for.
 */
const later = new Map<string, { fence: number; hash: string; runs: PublishedRun[] }>();
/** Background writes not ended yet (waiting for the lock, or writing). */
const laterPending = new Set<Promise<void>>();
/** Background writes that have their lock and are writing (out of `later`: new asks start another). */
const laterWriting = new Set<{ fence: number; hash: string; runs: PublishedRun[] }>();

/**
 * At a worker's stop: waits up to `waitMs` for the background legacy writes (each takes its lock
 * as soon as the holder lets go); answers what the ones not ended would have written (dropped with
 * the process: the caller says so): how many outputs' files, and the publishes they would list.
 */
export async function settleLegacyWrites(waitMs: number): Promise<{ outputs: number; runs: number }> {
  if (laterPending.size === 0) return { outputs: 0, runs: 0 };
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    Promise.all([...laterPending]),
    new Promise<void>((resolve) => (timer = setTimeout(resolve, waitMs))),
  ]);
  clearTimeout(timer);
  const left = [...later.values(), ...laterWriting];
  return { outputs: left.length, runs: left.reduce((sum, pending) => sum + pending.runs.length, 0) };
}

/**
 * `writeLegacy` once its lock is had, in the background (best effort: nothing waits for it but a
 * worker's stop, `settleLegacyWrites`, for a moment; a process that exits first drops it). Writes asked for one output meanwhile join it: one wait per
 * output, not one per publish (review helper-173).
 */
function writeLegacyLater(outputDir: string, fence: number, hash: string, published?: PublishedRun): void {
  const pending = later.get(outputDir);
  if (pending) {
    if (fence > pending.fence) Object.assign(pending, { fence, hash });
    if (published) pending.runs.push(published);
    return;
  }
  let end!: () => void;
  const ended = new Promise<void>((resolve) => (end = resolve));
  const mine = { fence, hash, runs: published ? [published] : [] };
  later.set(outputDir, mine);
  laterPending.add(ended);
  void ended.then(() => laterPending.delete(ended));
  let tries = 0;
  const attempt = (): void => {
    lockOutputFile(outputDir, LEGACY_LOCK_FILE, LATER_WAIT_MS).then(
      async (lock) => {
        later.delete(outputDir);
        laterWriting.add(mine);
        try {
          if (await replaceLegacy(outputDir, mine.fence, mine.hash, mine.runs)) await syncPath(outputDir);
        } catch {
          // best effort
        } finally {
          laterWriting.delete(mine);
          lock.release();
          end();
        }
      },
      () => {
        if (++tries < LEGACY_LATER_TRIES) return attempt();
        later.delete(outputDir);
        end();
        process.stderr.write(
          `WARNING: ${path.join(outputDir, LEGACY_FILE)} not updated: its lock was held for ${Math.round((LEGACY_LATER_TRIES * LATER_WAIT_MS) / 60_000)} min (a writer paused inside its write?); workers of the previous version may miss ${mine.runs.length} publish(es) there\n`,
        );
      },
    );
  };
  attempt();
}

/**
 * The legacy file with the higher of its fence and `fence`, and `runs` in its list (each before any
 * later attempt of its job: a previous-version worker takes a job's last line as its newest
 * publish — review helper-171 —, else last). Not written when it would not change (false).
 */
async function replaceLegacy(outputDir: string, fence: number, hash: string, runs: PublishedRun[]): Promise<boolean> {
  // Unreadable now: it may hold a higher fence; not replaced (readLegacy throws).
  const legacy = await readLegacy(outputDir);
  const raises = (legacy?.fence ?? 0) < fence;
  const jobs = [...(legacy?.jobs ?? [])];
  let lists = false;
  for (const entry of runs.map(publishedRunEntry)) {
    if (jobs.includes(entry)) continue;
    lists = true;
    const later = jobs.findIndex((line) => laterAttemptOfJob(line, entry));
    jobs.splice(later < 0 ? jobs.length : later, 0, entry);
  }
  if (!raises && !lists) return false;
  // No fence to write (a listing alone) into a file that has none: left to a writer with a fence.
  if (!legacy && fence <= 0) return false;
  while (jobs.length > 1 && JSON.stringify(jobs).length > JOBS_MAX_BYTES) jobs.shift();
  const top = raises || !legacy ? { fence, hash } : { fence: legacy.fence, hash: legacy.hash };
  const temp = outputTempName(outputDir, ".published-fence-writing.");
  try {
    await writeSynced(temp, JSON.stringify(jobs.length ? { ...top, jobs } : top), "w");
    await fs.rename(temp, path.join(outputDir, LEGACY_FILE));
  } finally {
    await fs.rm(temp, { force: true }).catch(() => {});
  }
  return true;
}

/** Whether list line `line` is of the same job as `entry`, and a later attempt of it. */
function laterAttemptOfJob(line: string, entry: string): boolean {
  const [a] = parsePublishedRuns([line]);
  const [b] = parsePublishedRuns([entry]);
  return !!a && !!b && jobPartOf(a.runId) === jobPartOf(b.runId) && attemptOfRunId(a.runId) > attemptOfRunId(b.runId);
}

/** What `pointCurrentAtRecord` left `current` naming. */
export type CurrentSwap =
  /** The build of `fence`: the caller's, or a newer fence's recorded meanwhile. */
  | { kind: "swapped"; fence: number; hash: string }
  /**
   * A newer fence is recorded whose build is not on this host (its publisher's disk, or a build
   * lost): `current` names what it named before (`swapped: false`) or the last build followed.
   */
  | { kind: "newer-not-here"; newest: PublishedFence; swapped: boolean };

/**
 * Points `current` at `hash`, published with `fence` and recorded — or at a newer recorded fence's
 * build: never back over it. Swaps of one output exclude each other (current-lock.ts), and the
 * record is read inside the lock, so a swapper held up inside its swap (a pause, a slow disk)
 * cannot rename an older link over a newer publisher's after it (helper-146): the newer one's
 * swap waits for it and reads the newer record. A newer record whose build is not on this host
 * leaves `current` as it is (its publisher, or repair, moves it). After each swap the record is
 * read again and a newer fence followed, as before the lock: where the lock excluded nothing
 * after all (its companion killed mid-swap, a filesystem without locks, no perl), `current`
 * still ends on the newest build. A lock not had within `lockWaitMs` (a swapper held up that
 * long) and a record that cannot be read before the swap fail as `CurrentSwapError("swap")` for
 * `hash`: `current` still names what it named, and repair moves it.
 */
export async function pointCurrentAtRecord(
  outputDir: string,
  fence: number,
  hash: string,
  options: { lockWaitMs?: number } = {},
): Promise<CurrentSwap> {
  const own = hash;
  const lock = await lockCurrent(outputDir, options.lockWaitMs).catch((error: unknown) => {
    throw new CurrentSwapError("swap", own, error);
  });
  let swapped = false;
  try {
    const newest = await readPublishedFence(outputDir).catch((error: unknown) => {
      throw new CurrentSwapError("swap", own, error);
    });
    if (newest && newest.fence > fence) {
      if (!BUILD_HASH.test(newest.hash) || !existsSync(buildDirOf(outputDir, newest.hash))) {
        return { kind: "newer-not-here", newest, swapped: false };
      }
      ({ fence, hash } = newest);
    }
    for (let rounds = 0; ; rounds++) {
      await pointCurrent(outputDir, hash);
      swapped = true;
      const now = await readPublishedFence(outputDir);
      if (rounds === 4 || !now || now.fence <= fence || !BUILD_HASH.test(now.hash)) {
        return { kind: "swapped", fence, hash };
      }
      if (!existsSync(buildDirOf(outputDir, now.hash))) return { kind: "newer-not-here", newest: now, swapped: true };
      ({ fence, hash } = now);
    }
  } catch (error) {
    // Before any swap: `current` was not moved at all (the caller's note says so for its build).
    if (!swapped && error instanceof CurrentSwapError && error.stage === "swap" && error.hash !== own) {
      throw new CurrentSwapError(error.stage, own, error.cause);
    }
    throw error;
  } finally {
    lock.release();
  }
}

/** link(2)'s answers on a filesystem (or mount) that has no hard links. */
const NO_HARD_LINKS = new Set(["EPERM", "ENOTSUP", "EOPNOTSUPP", "ENOSYS"]);

async function writeSynced(file: string, content: string, flags: "w" | "wx"): Promise<void> {
  const handle = await fs.open(file, flags, 0o644);
  try {
    await handle.writeFile(content);
    await handle.sync();
  } catch (error) {
    throw namingFile(file, error);
  } finally {
    await handle.close();
  }
}

/**
 * An entry for `fence` that another call created: it names `hash` (else "fence-reused"; one that
 * cannot be read yet — a writer between its create and its write, or a failing disk — fails this
 * call, to be tried again), and it and its name are synced by this call too before it says "on
 * disk": the other call's syncs may have failed.
 */
async function confirmEntry(outputDir: string, fence: number, hash: string): Promise<FenceRecord> {
  const entry = path.join(outputDir, `${ENTRY_PREFIX}${fence}`);
  const found = await readEntryHash(outputDir, fence);
  if (found !== hash && found !== "" && found !== GONE)
    return { status: "fence-reused", known: { fence, hash: found } };
  if (found !== hash) throw new Error(`the published-fence entry ${entry} cannot be read yet`);
  await syncPath(entry);
  await syncPath(outputDir);
  return { status: "recorded" };
}

/**
 * The no-hard-links way: the entry created exclusively and written in place. One whose write
 * failed (a full disk) is removed, so it does not stand as a record without its build; one whose
 * sync failed stays (its name is a valid floor; another call may have read it and synced it).
 */
async function writeExclusive(entry: string, hash: string): Promise<void> {
  const handle = await fs.open(entry, "wx", 0o644);
  try {
    await handle.writeFile(hash).catch(async (error: unknown) => {
      await fs.rm(entry, { force: true }).catch(() => {});
      throw error;
    });
    await handle.sync();
  } catch (error) {
    throw namingFile(entry, error);
  } finally {
    await handle.close();
  }
}

async function exists(file: string): Promise<boolean> {
  return fs.access(file).then(
    () => true,
    () => false,
  );
}
