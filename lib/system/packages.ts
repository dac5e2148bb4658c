/**
 * System programs claimwatch runs (redis-server; Chromium for the browser tests). When one is
 * missing on Debian/Ubuntu and we are root (or have passwordless sudo), its Debian package is
 * installed, saying so; otherwise the error names the install command for the platform.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

export interface SystemProgram {
  binary: string;
  debianPackage: string;
  dnfPackage: string;
  brewPackage: string;
}

export const REDIS_SERVER: SystemProgram = {
  binary: "redis-server",
  debianPackage: "redis-server",
  dnfPackage: "redis",
  brewPackage: "redis",
};

/** libfaketime, for the tests that run a worker with a skewed clock (Debian package `faketime`). */
export const FAKETIME: SystemProgram = {
  binary: "faketime",
  debianPackage: "faketime",
  dnfPackage: "libfaketime",
  brewPackage: "libfaketime",
};

/** Test-only: the TLS test makes a self-signed certificate with it (Debian package `openssl`). */
/** strace, for the test that checks a build is fsynced before it is published (Linux only). */
export const STRACE: SystemProgram = {
  binary: "strace",
  debianPackage: "strace",
  dnfPackage: "strace",
  brewPackage: "strace",
};

export const OPENSSL: SystemProgram = {
  binary: "openssl",
  debianPackage: "openssl",
  dnfPackage: "openssl",
  brewPackage: "openssl",
};

export const CHROMIUM: SystemProgram = {
  binary: "chromium",
  debianPackage: "chromium",
  dnfPackage: "chromium",
  brewPackage: "--cask chromium",
};

/** Test-only: the alert and metrics tests run the real Prometheus (and promtool) and Alertmanager. */
export const PROMETHEUS: SystemProgram = {
  binary: "prometheus",
  debianPackage: "prometheus",
  dnfPackage: "golang-github-prometheus",
  brewPackage: "prometheus",
};

export const ALERTMANAGER: SystemProgram = {
  binary: "prometheus-alertmanager",
  debianPackage: "prometheus-alertmanager",
  dnfPackage: "alertmanager",
  brewPackage: "alertmanager",
};

export class ProgramMissingError extends Error {
  constructor(
    readonly program: SystemProgram,
    readonly installHint: string,
  ) {
    super(`${program.binary} was not found on PATH; install it with: ${installHint}`);
    this.name = "ProgramMissingError";
  }
}

const EXTRA_DIRS = ["/usr/bin", "/usr/sbin", "/usr/local/bin", "/opt/homebrew/bin"];

export function findProgram(binary: string): string | undefined {
  const dirs = [...(process.env.PATH ?? "").split(path.delimiter).filter(Boolean), ...EXTRA_DIRS];
  for (const dir of dirs) {
    const candidate = path.join(dir, binary);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** The command an operator would run on this platform to install `program`. */
export function installHint(program: SystemProgram): string {
  if (process.platform === "darwin") return `brew install ${program.brewPackage}`;
  if (fs.existsSync("/etc/debian_version")) return `sudo apt-get install -y ${program.debianPackage}`;
  if (fs.existsSync("/etc/redhat-release") || fs.existsSync("/etc/fedora-release")) {
    return `sudo dnf install -y ${program.dnfPackage}`;
  }
  return `your package manager (apt-get install ${program.debianPackage}, dnf install ${program.dnfPackage}, brew install ${program.brewPackage})`;
}

/** Returns the program's path, installing the Debian package first where that is possible. */
export function ensureProgram(program: SystemProgram, say: (line: string) => void): string {
  const found = findProgram(program.binary);
  if (found) return found;
  if (process.platform === "linux" && fs.existsSync("/etc/debian_version")) {
    const asRoot = process.getuid?.() === 0;
    const sudo = !asRoot && spawnSync("sudo", ["-n", "true"], { stdio: "ignore" }).status === 0;
    if (asRoot || sudo) {
      say(`${program.binary} is not installed; installing the Debian package ${program.debianPackage} with apt-get …`);
      const prefix = asRoot ? [] : ["sudo", "-n"];
      const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
      for (const args of [
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", program.debianPackage],
      ]) {
        const [command, ...rest] = [...prefix, ...args];
        spawnSync(command!, rest, { stdio: "inherit", env, timeout: 15 * 60_000 });
      }
      const installed = findProgram(program.binary);
      if (installed) return installed;
    }
  }
  throw new ProgramMissingError(program, installHint(program));
}
