/**
 * Builds what `npm start` and the container image run: the program and its dependencies
 * bundled into a few ES modules under dist/, whitespace and syntax minified.
 *
 *   node scripts/build.ts [--outdir <dir>]
 *
 * Why: the sources run as they are (`node src/main.ts`), but as 550 separate modules with
 * their full text kept in memory. The bundle is one module per part that loads at a
 * different time (the program, the management API's OpenAPI document, PostgreSQL, the
 * egress proxy's certificates), and holds about 13 MiB less at rest (bench/README.md,
 * "Footprint"). Identifiers are not renamed: class and function names stay as written, in
 * stack traces and in anything that reads them. A source map beside each file maps it
 * back to src/ (`node --enable-source-maps` uses it).
 *
 * The log writer's thread body (src/store/sqlite/sql-thread.mjs) is copied beside the
 * bundle: it is loaded by path, and it imports only Node's own modules.
 */
import { build, type BuildOptions } from 'esbuild';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
export const DEFAULT_OUTDIR = join(ROOT, 'dist');
const THREAD_BODY = 'sql-thread.mjs';

/**
 * The CommonJS dependencies (pg, pino, undici, …) call `require` for Node's modules; in
 * an ES module bundle that name must exist, so each output file starts by making one.
 */
const REQUIRE_BANNER = "import { createRequire as __svcCreateRequire } from 'node:module'; const require = __svcCreateRequire(import.meta.url);";

export function buildOptions(outdir: string): BuildOptions {
  return {
    absWorkingDir: ROOT,
    entryPoints: ['src/main.ts'],
    outdir,
    bundle: true,
    splitting: true,
    format: 'esm',
    // .mjs: the bundle is ES modules wherever it is copied, with or without a package.json.
    outExtension: { '.js': '.mjs' },
    platform: 'node',
    target: 'node24',
    minifyWhitespace: true,
    minifySyntax: true,
    sourcemap: 'linked',
    banner: { js: REQUIRE_BANNER },
    // Loaded by path at run time (copied below); pg's optional native driver is never installed.
    external: [`./${THREAD_BODY}`, 'pg-native'],
    logLevel: 'warning',
    metafile: true,
  };
}

/**
 * Builds into `outdir` (emptied first) and returns the source files the bundle holds,
 * relative to the project. Throws on any error or warning.
 */
export async function buildService(outdir: string = DEFAULT_OUTDIR): Promise<string[]> {
  rmSync(outdir, { recursive: true, force: true });
  mkdirSync(outdir, { recursive: true });
  const result = await build(buildOptions(outdir));
  if (result.errors.length > 0 || result.warnings.length > 0) {
    throw new Error(`build: ${result.errors.length} errors, ${result.warnings.length} warnings`);
  }
  copyFileSync(join(ROOT, 'src/store/sqlite', THREAD_BODY), join(outdir, THREAD_BODY));
  return Object.keys(result.metafile?.inputs ?? {});
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { outdir: { type: 'string' } } });
  await buildService(values.outdir ?? DEFAULT_OUTDIR);
}
