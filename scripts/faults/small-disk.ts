/**
 * A small filesystem of its own mounted over a directory, for filling up (a full disk:
 * notes/faults.md). ext4 on a loop device where the kernel allows it — a full ext4 refuses new
 * directories and long symlinks too, as a real disk does — else a tmpfs (which needs no blocks
 * for those), else none (not root). Mounted and unmounted with mount(8)/umount(8), by path.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";

export interface SmallDisk {
  kind: "ext4" | "tmpfs";
  /** Unmounts (lazily: a process still inside cannot keep it) and removes the image; idempotent. */
  unmount(): void;
}

const run = (command: string, args: string[]) => spawnSync(command, args, { encoding: "utf8" });

/** Mounts a filesystem of about `bytes` over `dir` (created if missing); a reason string when none can be. */
export function mountSmallDisk(dir: string, bytes: number): SmallDisk | string {
  fs.mkdirSync(dir, { recursive: true });
  const image = `${dir}.ext4`;
  let mounted = false;
  const unmount = (kind: SmallDisk["kind"]) => () => {
    if (mounted) run("umount", ["-l", dir]);
    mounted = false;
    if (kind === "ext4") fs.rmSync(image, { force: true });
  };
  // ext4's own metadata takes a share of a small image: what is left is about `bytes`.
  fs.writeFileSync(image, "");
  fs.truncateSync(image, Math.ceil(bytes * 1.5) + 2 * 1024 * 1024);
  const made = run("mkfs.ext4", ["-q", "-F", "-m", "0", image]);
  if (made.status === 0 && run("mount", ["-o", "loop", image, dir]).status === 0) {
    mounted = true;
    return { kind: "ext4", unmount: unmount("ext4") };
  }
  fs.rmSync(image, { force: true });
  const tmpfs = run("mount", ["-t", "tmpfs", "-o", `size=${bytes}`, "tmpfs", dir]);
  if (tmpfs.status === 0) {
    mounted = true;
    return { kind: "tmpfs", unmount: unmount("tmpfs") };
  }
  return `neither a loop-mounted ext4 nor a tmpfs could be mounted (${tmpfs.stderr.trim() || tmpfs.error?.message}): needs root`;
}

/**
 * Appends to `fd` until its disk answers ENOSPC, in ever smaller pieces (down to the last byte
 * with the default sizes). Call it again to top the disk up after others freed space.
 */
export function fillToLastByte(fd: number, sizes: number[] = [1024 * 1024, 64 * 1024, 4096, 1]): void {
  for (const size of sizes) {
    const piece = Buffer.alloc(size, 0x5a);
    for (;;) {
      try {
        fs.writeSync(fd, piece);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === "ENOSPC") break;
        throw error;
      }
    }
  }
}
