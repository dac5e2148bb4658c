/**
 * One file per entry point: the worker and the CLI start from a bundle of their TypeScript,
 * built by esbuild (the compiler tsx itself uses) into node_modules/.cache/claimwatch and rebuilt
 * when one of its sources changed. Loading each module through tsx's hooks is most of a start:
 * `claimwatch --help` 1.2 s through tsx against 0.55 s bundled, a worker's start to its first
 * line 1.1 s against 0.55 s (measured 2026-12-05, see BENCHMARKS.md). Faster deploys and a
 * snappier CLI at 02:00.
 *
 * Plain JavaScript, so bin/claimwatch.mjs can load it without tsx. Packages stay external
 * (node_modules, as before); every module keeps its own `import.meta.url` and its classes and
 * functions their names, so a bundle behaves as the modules did. When a bundle cannot be built
 * or written (a read-only checkout, esbuild missing), `bundled` answers null and the caller runs
 * the TypeScript through tsx as before.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const CACHE = path.join(ROOT, "node_modules", ".cache", "claimwatch");
/** Read by esbuild besides the sources: a change to them rebuilds too. */
const ALSO_READ = ["tsconfig.json", "package.json"];

/** A JSON file, or null: a bundle's stamp (`{ esbuild, inputs: [[path from the root, mtimeMs, size]] }`). */
function readStamp(file) {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8"));
  } catch {
    return null;
  }
}

function statOf(relative) {
  const stat = fs.statSync(path.join(ROOT, relative));
  return [relative, stat.mtimeMs, stat.size];
}

function isFresh(stamp, esbuildVersion, bundleFile) {
  if (!stamp || stamp.esbuild !== esbuildVersion || !Array.isArray(stamp.inputs)) return false;
  try {
    if (!fs.existsSync(bundleFile)) return false;
    return stamp.inputs.every(([relative, mtimeMs, size]) => {
      const [, nowMtimeMs, nowSize] = statOf(relative);
      return nowMtimeMs === mtimeMs && nowSize === size;
    });
  } catch {
    return false; // a source gone
  }
}

/** esbuild plugin: `import.meta.url` in a source is that source's own URL, not the bundle's. */
const ownImportMetaUrl = {
  name: "own-import-meta-url",
  setup(build) {
    build.onLoad({ filter: /\.[cm]?[jt]sx?$/ }, async (args) => {
      if (args.path.includes(`${path.sep}node_modules${path.sep}`)) return undefined;
      const source = await fs.promises.readFile(args.path, "utf8");
      if (!source.includes("import.meta.url")) return undefined;
      const loader = path.extname(args.path).slice(1).replace(/^[cm]/, "");
      return {
        contents: source.replaceAll("import.meta.url", JSON.stringify(pathToFileURL(args.path).href)),
        loader: loader === "mjs" || loader === "cjs" ? "js" : loader,
      };
    });
  },
};

/**
 * The path of an up-to-date bundle of `entry` (a path from the repository root, such as
 * "worker/index.ts"), built now when missing or stale; null when it cannot be built.
 * `onBuild` hears a line when a build happens or fails (a launcher says it).
 */
export async function bundled(entry, onBuild = () => {}) {
  const name = entry.replace(/\.[cm]?[jt]sx?$/, "").replaceAll(/[\\/]/g, "-");
  const bundleFile = path.join(CACHE, `${name}.mjs`);
  const stampFile = path.join(CACHE, `${name}.json`);
  // The version from its package.json: loading esbuild itself is for a build only.
  const installed = readStamp(path.join(ROOT, "node_modules", "esbuild", "package.json"))?.version;
  if (installed && isFresh(readStamp(stampFile), installed, bundleFile)) return bundleFile;
  let esbuild;
  try {
    esbuild = await import("esbuild");
  } catch (error) {
    onBuild(`bundle ${entry}: esbuild not found (${error.message}); running it through tsx`);
    return null;
  }
  try {
    const started = performance.now();
    const startedAt = Date.now();
    fs.mkdirSync(CACHE, { recursive: true });
    // Written beside, then renamed: a start that reads the bundle meanwhile sees a whole one.
    const unique = `${process.pid}-${Math.random().toString(36).slice(2)}`;
    const temporary = `${bundleFile}.${unique}`;
    const result = await esbuild.build({
      absWorkingDir: ROOT,
      entryPoints: [entry],
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      packages: "external",
      keepNames: true,
      sourcemap: "inline",
      metafile: true,
      write: false,
      outfile: bundleFile,
      logLevel: "silent",
      plugins: [ownImportMetaUrl],
    });
    const inputs = [...Object.keys(result.metafile.inputs), ...ALSO_READ].map(statOf);
    fs.writeFileSync(temporary, result.outputFiles[0].contents);
    fs.renameSync(temporary, bundleFile);
    // A source saved while esbuild read the sources may not be in this bundle: used this once,
    // but not stamped, so the next start builds again.
    if (inputs.every(([, mtimeMs]) => mtimeMs < startedAt - 1_000)) {
      const stampTemporary = `${stampFile}.${unique}`;
      fs.writeFileSync(stampTemporary, JSON.stringify({ esbuild: esbuild.version, inputs }));
      fs.renameSync(stampTemporary, stampFile);
    }
    onBuild(`bundle ${entry}: built in ${Math.round(performance.now() - started)} ms (${inputs.length} files)`);
    return bundleFile;
  } catch (error) {
    onBuild(`bundle ${entry}: could not build it (${error.message.split("\n")[0]}); running it through tsx`);
    return null;
  }
}

/** Node arguments that run `entry`: its bundle when there is one, else the TypeScript through tsx. */
export async function entryArguments(entry, onBuild) {
  const file = await bundled(entry, onBuild);
  return file ? ["--enable-source-maps", file] : ["--import", "tsx", path.join(ROOT, entry)];
}
