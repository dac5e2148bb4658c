/**
 * One file per entry point: the worker and the CLI start from a bundle of their TypeScript,
 * built by esbuild (the compiler tsx itself uses) into node_modules/.cache/claimwatch and rebuilt
 * when one of its sources changed. Loading each module through tsx's hooks is most of a start:
 * `npm run bench:start` measured `claimwatch --help` at 0.70 s bundled against 1.16 s through
 * tsx, and a worker's start at 0.61 s against 1.13 s (2026-12-05). Faster deploys, and a CLI
 * that answers sooner at 02:00.
 *
 * Plain JavaScript, so bin/claimwatch.mjs can load it without tsx. Packages stay external
 * (node_modules, as before); every module keeps its own `import.meta.url` and its classes and
 * functions their names, so a bundle behaves as the modules did. When a bundle cannot be built
 * or written (a read-only checkout, a cache another user owns, esbuild missing), `bundled`
 * answers null and the caller runs the TypeScript through tsx as before.
 *
 * Content-addressed, like the builds claimwatch publishes: a bundle's file is named by the hash
 * of its bytes and never rewritten; a stamp per entry and checkout names the current one and the
 * sources (path, mtime, size) it was built from. A build whose sources changed while it ran is
 * used once but not stamped, so a slow stale build can never be taken for the current one.
 */
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

/** This checkout: the sources bundled unless a caller (a test) names another root. */
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
/** Read by esbuild besides the sources, or deciding how it builds: a change rebuilds too. */
const ALSO_READ = ["tsconfig.json", "package.json", "lib/launcher/bundle.mjs"];
/**
 * A bundle's mtime is when it was last current (built, or named by a stamp until a newer one
 * replaced it); one that no stamp names is removed once this old: a start that was handed it
 * just before has long loaded it.
 */
const OLD_BUNDLE_MS = 10 * 60_000;
/** esbuild's one service in this process serves every build: stopped when the last one ends. */
let buildsRunning = 0;

/** A JSON file, or null. */
function readJson(file) {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8"));
  } catch {
    return null;
  }
}

function statOf(root, relative) {
  const stat = fs.statSync(path.join(root, relative));
  return [relative, stat.mtimeMs, stat.size];
}

/** The stamp `{ root, esbuild, bundle, inputs: [[path from the root, mtimeMs, size]] }` is current. */
function isFresh(stamp, esbuildVersion, { root, cache }) {
  if (!stamp || stamp.root !== root || stamp.esbuild !== esbuildVersion) return false;
  if (typeof stamp.bundle !== "string" || !Array.isArray(stamp.inputs)) return false;
  try {
    if (!fs.existsSync(path.join(cache, stamp.bundle))) return false;
    return stamp.inputs.every(([relative, mtimeMs, size]) => {
      const [, nowMtimeMs, nowSize] = statOf(root, relative);
      return nowMtimeMs === mtimeMs && nowSize === size;
    });
  } catch {
    return false; // a source gone
  }
}

/**
 * esbuild plugin: `import.meta.url` in a source is that source's own URL, not the bundle's. Done
 * by esbuild's own parser (a `define` while the file alone is compiled), so the words in a string
 * or a comment stay as they are; the file's source map is kept inline for the bundle's.
 */
function ownImportMetaUrl(esbuild, root) {
  return {
    name: "own-import-meta-url",
    setup(build) {
      build.onLoad({ filter: /\.[cm]?[jt]sx?$/ }, async (args) => {
        if (args.path.includes(`${path.sep}node_modules${path.sep}`)) return undefined;
        const source = await fs.promises.readFile(args.path, "utf8");
        if (!source.includes("import.meta.url")) return undefined;
        const extension = path.extname(args.path).slice(1);
        const compiled = await esbuild.transform(source, {
          loader: extension.replace(/^[cm]/, ""), // .mts is ts, .cjs is js
          format: "esm",
          target: "node20",
          keepNames: true,
          sourcefile: args.path,
          sourcemap: "inline",
          tsconfigRaw: fs.readFileSync(path.join(root, "tsconfig.json"), "utf8"),
          define: { "import.meta.url": JSON.stringify(pathToFileURL(args.path).href) },
        });
        // Still TypeScript to the bundler (valid as such), which lets a type-only re-export pass.
        return { contents: compiled.code, loader: /^[cm]?tsx?$/.test(extension) ? "ts" : "js" };
      });
    },
  };
}

function writeAtomically(file, contents) {
  const temporary = `${file}.${process.pid}-${Math.random().toString(36).slice(2)}.tmp`;
  fs.writeFileSync(temporary, contents);
  fs.renameSync(temporary, file);
}

/** Marks `file` current now (see OLD_BUNDLE_MS); gone already is fine. */
function touch(file) {
  try {
    const now = new Date();
    fs.utimesSync(file, now, now);
  } catch {
    // removed meanwhile
  }
}

/**
 * Bundles of `name` that neither this build nor the stamp names, not current for OLD_BUNDLE_MS,
 * and temporary files of `name` as old (a start killed between its write and its rename).
 */
function removeOldBundles(cache, name, current, stampFile) {
  const stamped = readJson(stampFile)?.bundle;
  for (const file of fs.readdirSync(cache)) {
    if (!file.startsWith(`${name}.`) || !/\.(mjs|tmp)$/.test(file) || file === current || file === stamped) continue;
    const full = path.join(cache, file);
    try {
      if (Date.now() - fs.statSync(full).mtimeMs > OLD_BUNDLE_MS) fs.rmSync(full, { force: true });
    } catch {
      // removed by another start meanwhile
    }
  }
}

async function build(entry, name, stampFile, onBuild, { root, cache }) {
  let esbuild;
  try {
    esbuild = await import("esbuild");
  } catch (error) {
    onBuild(`bundle ${entry}: esbuild not found (${error.message}); running it through tsx`);
    return null;
  }
  try {
    fs.mkdirSync(cache, { recursive: true });
    fs.accessSync(cache, fs.constants.W_OK); // else each start would build and then not keep it
  } catch (error) {
    onBuild(`bundle ${entry}: cannot write ${cache} (${error.code ?? error.message}); running it through tsx`);
    return null;
  }
  const started = performance.now();
  const startedAt = Date.now();
  buildsRunning++;
  try {
    const result = await esbuild.build({
      absWorkingDir: root,
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
      outfile: path.join(cache, `${name}.mjs`),
      logLevel: "silent",
      plugins: [ownImportMetaUrl(esbuild, root)],
    });
    const alsoRead = ALSO_READ.filter((file) => fs.existsSync(path.join(root, file)));
    const inputs = [...Object.keys(result.metafile.inputs), ...alsoRead].map((file) => statOf(root, file));
    const contents = result.outputFiles[0].contents;
    // The name ends in .mjs: Node's package-type lookup stops at node_modules, so .js would be CommonJS.
    const bundle = `${name}.${createHash("sha256").update(contents).digest("hex").slice(0, 16)}.mjs`;
    if (fs.existsSync(path.join(cache, bundle))) touch(path.join(cache, bundle));
    else writeAtomically(path.join(cache, bundle), contents);
    // A source saved while esbuild read the sources may not be in this bundle: it is used this
    // once, but not stamped, so the next start builds again. (An mtime later than now is a
    // clock's, not an edit during the build: stamped, or every start would build.)
    const finishedAt = Date.now();
    if (inputs.every(([, mtimeMs]) => mtimeMs < startedAt - 1_000 || mtimeMs > finishedAt + 1_000)) {
      const replaced = readJson(stampFile)?.bundle;
      writeAtomically(stampFile, JSON.stringify({ root, esbuild: esbuild.version, bundle, inputs }));
      if (replaced && replaced !== bundle) touch(path.join(cache, replaced)); // current until now
    }
    removeOldBundles(cache, name, bundle, stampFile);
    onBuild(`bundle ${entry}: built in ${Math.round(performance.now() - started)} ms (${inputs.length} files)`);
    return path.join(cache, bundle);
  } catch (error) {
    onBuild(`bundle ${entry}: could not build it (${error.message.split("\n")[0]}); running it through tsx`);
    return null;
  } finally {
    // esbuild's service process would otherwise stay a child of this one for its whole life;
    // stopping it under another build in flight would leave that one unanswered for good.
    if (--buildsRunning === 0) await esbuild.stop();
  }
}

/** One build per bundle at a time in this process. */
const building = new Map();

/**
 * The path of an up-to-date bundle of `entry` (a path from the root, such as "worker/index.ts"),
 * built now when missing or stale; null when it cannot be built. `onBuild` hears a line when a
 * build happens or fails (a launcher says it). `root` and `cache` are for tests: this checkout
 * and its node_modules/.cache/claimwatch by default.
 */
export async function bundled(entry, onBuild = () => {}, { root = ROOT, cache } = {}) {
  const where = { root, cache: cache ?? path.join(root, "node_modules", ".cache", "claimwatch") };
  // Per checkout: a moved or copied tree (its `import.meta.url`s are in the bundle) builds anew.
  const checkout = createHash("sha256").update(root).digest("hex").slice(0, 8);
  const name = `${entry.replace(/\.[cm]?[jt]sx?$/, "").replaceAll(/[\\/]/g, "-")}-${checkout}`;
  const stampFile = path.join(where.cache, `${name}.json`);
  // The version from its package.json: loading esbuild itself is for a build only.
  const installed = readJson(path.join(ROOT, "node_modules", "esbuild", "package.json"))?.version;
  const stamp = readJson(stampFile);
  if (installed && isFresh(stamp, installed, where)) return path.join(where.cache, stamp.bundle);
  if (!building.has(stampFile)) {
    building.set(
      stampFile,
      build(entry, name, stampFile, onBuild, where).finally(() => building.delete(stampFile)),
    );
  }
  return building.get(stampFile);
}

/** Node arguments that run `entry` of this checkout: its bundle, else its TypeScript through tsx. */
export async function entryArguments(entry, onBuild) {
  const file = await bundled(entry, onBuild);
  return file ? ["--enable-source-maps", file] : ["--import", import.meta.resolve("tsx"), path.join(ROOT, entry)];
}
