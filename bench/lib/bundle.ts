/**
 * An experiment of the footprint bench, not a way to run the service: the program and its
 * dependencies bundled into a few ES modules, to measure what a build step would save.
 * The service runs from its sources (DESIGN §2: Node's type stripping, no build step, no
 * dist/); bench/README.md ("Footprint") has the figures this measures.
 *
 *   node bench/lib/bundle.ts --outdir <dir> [--root <checkout>]
 *
 * esbuild bundles `src/main.ts` of the checkout: one ES module per part that loads at a
 * different time (the program, the OpenAPI document, PostgreSQL, the egress proxy's
 * certificates), whitespace and syntax minified, identifiers not renamed. The log
 * writer's thread body (src/store/sqlite/sql-thread.mjs), loaded by path, is copied beside
 * it. The output needs no node_modules.
 */
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const THIS_CHECKOUT = fileURLToPath(new URL('../../', import.meta.url));
const THREAD_BODY = 'sql-thread.mjs';

/**
 * The CommonJS dependencies (pg, pino, undici, …) call `require` for Node's modules; in
 * an ES module bundle that name must exist, so each output file starts by making one.
 */
const REQUIRE_BANNER = "import { createRequire as __svcCreateRequire } from 'node:module'; const require = __svcCreateRequire(import.meta.url);";

/**
 * Bundles the checkout at `root` into `outdir` (emptied first); returns the entry point
 * and the source files the bundle holds, relative to the checkout. Throws on any error or
 * warning.
 */
export async function bundleService(outdir: string, root: string = THIS_CHECKOUT): Promise<{ main: string; inputs: string[] }> {
  rmSync(outdir, { recursive: true, force: true });
  mkdirSync(outdir, { recursive: true });
  const result = await build({
    absWorkingDir: root,
    entryPoints: ['src/main.ts'],
    outdir,
    bundle: true,
    splitting: true,
    format: 'esm',
    // .mjs: ES modules wherever the directory is, with or without a package.json.
    outExtension: { '.js': '.mjs' },
    platform: 'node',
    target: 'node24',
    minifyWhitespace: true,
    minifySyntax: true,
    banner: { js: REQUIRE_BANNER },
    // Loaded by path at run time (copied below); pg's optional native driver is never installed.
    external: [`./${THREAD_BODY}`, 'pg-native'],
    logLevel: 'warning',
    metafile: true,
  });
  if (result.errors.length > 0 || result.warnings.length > 0) {
    throw new Error(`bundle: ${result.errors.length} errors, ${result.warnings.length} warnings`);
  }
  copyFileSync(join(root, 'src/store/sqlite', THREAD_BODY), join(outdir, THREAD_BODY));
  return { main: join(outdir, 'main.mjs'), inputs: Object.keys(result.metafile.inputs) };
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { outdir: { type: 'string' }, root: { type: 'string' } } });
  if (values.outdir === undefined) throw new Error('--outdir <dir> is required');
  const { main } = await bundleService(resolve(values.outdir), values.root === undefined ? THIS_CHECKOUT : resolve(values.root));
  process.stdout.write(`${main}\n`);
}
