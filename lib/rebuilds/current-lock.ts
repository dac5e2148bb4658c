/**
 * One swapper of an output's `current` at a time, across processes and hosts that share the
 * output: `flock(2)` on `<output>/.current.lock` (black-box helper-146). A holder held up inside
 * its swap (a slow `symlink`, a pause, a hung disk) while a newer publisher recorded and swapped
 * used to rename its older link over the newer one afterwards; with the lock, the newer
 * publisher's swap waits for the late one to end, and each swapper reads the fence record inside
 * the lock (published-fence.ts `pointCurrentAtRecord`), so the newest record always wins.
 *
 * Node has no `flock`, so the locks are held by a companion process of this one, `perl` (Debian's
 * and Ubuntu's `perl-base` is Essential: always there): it opens each lock file, takes the lock
 * without blocking (polling every 5 ms while it is taken), answers `ok <id>`, and holds it until
 * told `unlock <id>` — or until this process is gone (its stdin ends; a kernel lock dies with its
 * holder). A paused worker's companion is paused with it (one process group) or keeps its locks:
 * either way no one swaps under a paused swapper; its waiters give up after `LOCK_WAIT_MS` and
 * leave `current` to repair. SIGTERM, SIGINT and SIGHUP are ignored by the companion: a deploy's
 * signal to the group must not free a lock while this process is still renaming under it.
 *
 * Where perl cannot be started, or the lock file cannot be opened (another account's, mode 0600),
 * swaps go on without the lock (`exclusive: false`; said once on stderr). `pointCurrentAtRecord`
 * follows a newer record after every swap, locked or not: a lock that excluded nothing after all
 * (its companion killed mid-swap, an NFS mount without locks) still ends on the newest build.
 */
import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";

/**
 * How long a publish's swap waits for another swapper of the same output before leaving it to
 * repair (within a worker's stop budgets: a stop does not wait on it for long).
 */
export const LOCK_WAIT_MS = 5_000;
/** Repair's wait: it runs again at the next heartbeat, and must not hold up the worker's upkeep. */
export const REPAIR_LOCK_WAIT_MS = 500;

/** The lock file beside `current`. */
export const CURRENT_LOCK_FILE = ".current.lock";

const COMPANION = String.raw`
use strict;
use Fcntl qw(:flock O_RDWR O_RDONLY O_CREAT);
use POSIX qw(EWOULDBLOCK EAGAIN EACCES EROFS);
$SIG{TERM} = $SIG{INT} = $SIG{HUP} = 'IGNORE';
$| = 1;
my (%held, %waiting);
my $buffer = '';
sub refuse { my ($id, $why) = @_; $why =~ s/\n/ /g; print "error $id $why\n"; }
while (1) {
  my $in = '';
  vec($in, fileno(STDIN), 1) = 1;
  my $ready = select(my $out = $in, undef, undef, %waiting ? 0.005 : undef);
  if ($ready > 0) {
    my $read = sysread(STDIN, my $chunk, 65536);
    exit 0 unless $read;
    $buffer .= $chunk;
    while ($buffer =~ s/^([^\n]*)\n//) {
      my ($command, $id, $file) = split / /, $1, 3;
      if ($command eq 'lock') {
        my $fh;
        # Read-write: an exclusive lock on NFS (emulated with fcntl) needs it; read-only where
        # writing is refused (another account's file, a read-only mount), which flock allows.
        if (sysopen($fh, $file, O_RDWR | O_CREAT, 0666)
            || (($! == EACCES || $! == EROFS) && sysopen($fh, $file, O_RDONLY))) { $waiting{$id} = $fh; }
        else { refuse($id, "$!"); }
      } elsif ($command eq 'unlock') {
        close(delete $held{$id}) if exists $held{$id};
        close(delete $waiting{$id}) if exists $waiting{$id};
      }
    }
  }
  for my $id (keys %waiting) {
    if (flock($waiting{$id}, LOCK_EX | LOCK_NB)) { $held{$id} = delete $waiting{$id}; print "ok $id\n"; }
    elsif ($! != EWOULDBLOCK && $! != EAGAIN) { refuse($id, "flock: $!"); close(delete $waiting{$id}); }
  }
}
`;

export interface CurrentLock {
  /** Whether swaps of this output are excluded (false: no companion could be started). */
  exclusive: boolean;
  release(): void;
}

export class CurrentLockBusyError extends Error {
  override name = "CurrentLockBusyError";
  constructor(outputDir: string, waitedMs: number) {
    super(
      `${outputDir}/current is being swapped by another process (its lock held over ${waitedMs < 1_000 ? `${waitedMs} ms` : `${Math.round(waitedMs / 1_000)} s`}: a paused or hung worker); repair moves it later`,
    );
  }
}

type Waiter = { resolve: () => void; reject: (error: Error) => void };

class Companion {
  private readonly child: ChildProcess;
  private readonly waiters = new Map<string, Waiter>();
  private nextId = 0;
  private buffer = "";
  gone: Error | null = null;

  constructor() {
    const fail = (error: Error) => {
      if (this.gone) return;
      this.gone = error;
      for (const waiter of this.waiters.values()) waiter.reject(error);
      this.waiters.clear();
    };
    this.child = spawn("perl", ["-e", COMPANION], {
      stdio: ["pipe", "pipe", "pipe"],
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", LC_ALL: "C" } as unknown as NodeJS.ProcessEnv,
    });
    // First: a spawn that failed (ENOENT; EMFILE leaves no pipes) reports here, never unhandled.
    this.child.once("error", fail);
    this.child.once("exit", (code, signal) => fail(new Error(`the lock companion ended (${signal ?? code})`)));
    this.child.unref();
    const { stdin, stdout, stderr } = this.child;
    if (!stdin || !stdout || !stderr) {
      fail(new Error("the lock companion has no pipes (out of file handles?)"));
      return;
    }
    for (const stream of [stdin, stdout, stderr]) (stream as unknown as { unref?: () => void }).unref?.();
    stdin.on("error", () => {}); // a companion gone: its exit says so
    stderr.on("data", (chunk: Buffer) => process.stderr.write(`current lock: ${chunk.toString()}`));
    stdout.on("data", (chunk: Buffer) => this.onData(chunk.toString()));
  }

  private onData(text: string): void {
    this.buffer += text;
    for (let newline = this.buffer.indexOf("\n"); newline >= 0; newline = this.buffer.indexOf("\n")) {
      const [answer, id, ...why] = this.buffer.slice(0, newline).split(" ");
      this.buffer = this.buffer.slice(newline + 1);
      const waiter = this.waiters.get(id ?? "");
      if (!waiter) continue; // given up on already (its unlock frees it)
      this.waiters.delete(id!);
      if (answer === "ok") waiter.resolve();
      else waiter.reject(new Error(`the lock cannot be taken: ${why.join(" ")}`));
    }
  }

  /** The lock of `file`: resolves once held (then `unlock`), or rejects after `waitMs`. */
  lock(file: string, waitMs: number): Promise<{ unlock: () => void }> {
    if (this.gone) return Promise.reject(this.gone);
    const id = String(++this.nextId);
    const unlock = () => {
      if (!this.gone) this.child.stdin?.write(`unlock ${id}\n`);
    };
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(id);
        unlock(); // drops the wait (or a lock taken just now)
        reject(new CurrentLockBusyError(path.dirname(file), waitMs));
      }, waitMs);
      this.waiters.set(id, {
        resolve: () => {
          clearTimeout(timer);
          resolve({ unlock });
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      });
      this.child.stdin?.write(`lock ${id} ${file}\n`);
    });
  }
}

let companion: Companion | null = null;
/** perl cannot be started here (ENOENT, EACCES): not tried again on every swap. */
let noCompanion: Error | null = null;
const PERMANENT_SPAWN_ERRORS = new Set(["ENOENT", "EACCES"]);
const warned = new Set<string>();

function warnOnce(key: string, text: string): void {
  if (warned.has(key)) return;
  warned.add(key);
  process.stderr.write(`WARNING: ${text}\n`);
}

/**
 * The lock of `outputDir`'s `current`, waited for up to `waitMs`: `CurrentLockBusyError` when
 * another swapper holds it that long. Without a companion (perl missing) or a lock that cannot be
 * taken here (a lock file that cannot be opened, a filesystem without locks), a lock that
 * excludes nothing (`exclusive: false`). A lock held by a paused or hung swapper is never swapped
 * around: `current` lags (said by repair and the health banner) until that swapper goes on or is
 * stopped — a lag, not a rollback (black-box helper-150 saw a repair that swapped around one put
 * an older build back for 34 s).
 */
export async function lockCurrent(outputDir: string, waitMs = LOCK_WAIT_MS): Promise<CurrentLock> {
  return lockOutputFile(outputDir, CURRENT_LOCK_FILE, waitMs);
}

/**
 * The lock of another file of `outputDir` that this version's writers replace by read, change and
 * rename (`lockName`, e.g. the legacy fence file's `.published-fence.lock`), as `lockCurrent`
 * takes `current`'s: `CurrentLockBusyError` after `waitMs`, a lock that excludes nothing where
 * none can be taken.
 */
export async function lockOutputFile(outputDir: string, lockName: string, waitMs: number): Promise<CurrentLock> {
  const file = path.join(outputDir, lockName);
  if (file.includes("\n")) throw new Error(`an output path with a line break cannot be locked: ${outputDir}`);
  const unlocked = { exclusive: false, release: () => {} };
  if (noCompanion) return unlocked;
  if (!companion || companion.gone) companion = new Companion();
  const mine = companion;
  try {
    const { unlock } = await mine.lock(file, waitMs);
    let released = false;
    return {
      exclusive: true,
      release: () => {
        if (released) return;
        released = true;
        unlock();
      },
    };
  } catch (error) {
    if (error instanceof CurrentLockBusyError) throw error;
    if (!(error instanceof Error)) throw error;
    if (!mine.gone) {
      warnOnce(
        `file ${file}`,
        lockName === CURRENT_LOCK_FILE
          ? `swaps of ${outputDir}/current are not locked: ${error.message} (${file}); a swapper held up inside its swap may briefly put an older build back`
          : `${file} cannot be locked: ${error.message}; writers of the file it guards are not kept apart`,
      );
      return unlocked;
    }
    if (PERMANENT_SPAWN_ERRORS.has((error as NodeJS.ErrnoException).code ?? "")) noCompanion = error;
    warnOnce(
      "companion",
      `swaps of current are not locked (${error.message}; is perl installed?): a swapper held up inside its swap may briefly put an older build back`,
    );
    return unlocked;
  }
}
