/**
 * Starts the command line once src/main.ts has checked the Node version.
 *
 * Node strips TypeScript types while loading each module, and the stripper keeps tens of
 * megabytes for the life of the process. Node's compile cache stores the stripped and
 * compiled modules, so later starts skip that work and its memory. It has to be enabled
 * before the modules load: hence this file imports the rest dynamically. The cache lives
 * in NODE_COMPILE_CACHE, else the OS temp directory; a cache that cannot be written is
 * simply not used.
 */
import { enableCompileCache, getCompileCacheDir } from 'node:module';

enableCompileCache();
// Worker threads (the log writer) start their own module loader: point them at the same cache.
const cacheDir = getCompileCacheDir();
if (cacheDir !== undefined) process.env['NODE_COMPILE_CACHE'] ??= cacheDir;
const { run } = await import('./run.ts');
await run(process.argv.slice(2));
