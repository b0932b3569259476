#!/usr/bin/env node
/**
 * Entry point: `node src/main.ts <command>` (the commands: src/cli/run.ts).
 *
 * Written to load on any Node that runs TypeScript files (no type syntax, no static import)
 * so that an older Node says which one is needed instead of failing somewhere inside the
 * modules it cannot run. Node releases before 22.18 refuse a `.ts` file before running any
 * of it; for them `npm start` and `npx svc-sidecar` are the way, as they use the Node 24
 * that `npm ci` installs into node_modules.
 */
const NEEDED_MAJOR = 24;

if (Number.parseInt(process.versions.node, 10) < NEEDED_MAJOR) {
  process.stderr.write(
    `svc-sidecar needs Node.js ${NEEDED_MAJOR} or later, and this is Node.js ${process.version}: run "npm ci" in the project (it installs Node ${NEEDED_MAJOR} into node_modules), then "npm start" or "npx svc-sidecar serve --config <file>".\n`,
  );
  process.exit(1);
}

await import('./cli/start.ts');
