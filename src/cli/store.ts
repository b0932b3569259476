/**
 * `svc-sidecar store copy --from <file> --to <postgres url>`: moves a SQLite store into an
 * empty PostgreSQL database (store/copy.ts). It reads no configuration file: the two
 * stores are named on the command line. The URL's password is never printed; without one
 * in the URL, the driver takes it from PGPASSWORD, which keeps it out of the process list.
 *
 * stdout carries the summary (rows per table); a refusal or failure is one line on stderr.
 * Exit codes: 0 copied, 1 refused or failed (nothing written), 2 bad usage.
 */
import { CopyRefusedError, copyStore } from '../store/copy.ts';
import { postgresUrl, redactedUrl } from '../store/postgres/url.ts';
import { UsageError, type OptionTable, type OptionValues } from './args.ts';

export const STORE_COMMANDS = {
  copy: {
    usage: 'store copy --from <file> --to <postgres-url>',
    summary: 'copy a SQLite store into an empty PostgreSQL database, ids and all',
    about:
      'Copies every row of the SQLite store at --from into the PostgreSQL database at --to, ids kept, in one transaction, and prints the rows copied per table. ' +
      'Both stores are migrated to the newest schema first. Refused, with nothing written, when --from does not exist or holds no store, or when the database holds anything ' +
      'beyond the built-in roles and permissions (users, configurations, API keys, classifications, logs). Stop the control plane before copying. ' +
      'Leave the password out of the URL and set PGPASSWORD to keep it out of the process list.',
    options: {
      from: { type: 'string', value: '<file>', required: true, description: 'the SQLite store file (store.path), e.g. ./data/svc.db' },
      to: { type: 'string', value: '<postgres-url>', required: true, description: 'the empty PostgreSQL database (store.url), postgres://user@host:5432/db' },
    },
    // Both options are required: the parser has refused a command line without them.
    run: (values: OptionValues) => storeCopy(String(values['from']), String(values['to'])),
  },
} as const satisfies Record<string, { usage: string; summary: string; about: string; options: OptionTable; run: (values: OptionValues) => Promise<number> }>;

export async function storeCopy(from: string, to: string): Promise<number> {
  const target = targetUrl(to);
  let copied;
  try {
    copied = await copyStore(from, to);
  } catch (error) {
    const message = withoutPassword(error instanceof Error ? error.message : String(error), target);
    // A refusal comes before any write; a failure rolls the copy back (the schema a
    // migration created stays: it is what the next attempt needs).
    const outcome = error instanceof CopyRefusedError ? `refused: ${message}; nothing was written` : `failed: ${message}; no row was copied`;
    process.stderr.write(`svc-sidecar store copy: ${outcome}.\n`);
    return 1;
  }
  const width = Math.max(...copied.map((entry) => entry.table.length));
  const total = copied.reduce((sum, entry) => sum + entry.rows, 0);
  process.stdout.write(
    `Copied ${from} into ${redactedUrl(target)}:\n${copied.map((entry) => `  ${entry.table.padEnd(width)}  ${entry.rows}`).join('\n')}\n  ${'total'.padEnd(width)}  ${total}\n`,
  );
  return 0;
}

/** The `--to` URL, parsed; anything but a postgres:// URL with a host is a usage error (never quoted: it may hold a password). */
function targetUrl(to: string): URL {
  const url = postgresUrl(to);
  if (url === null) throw new UsageError('store copy', '--to must be a postgres:// URL with a host (postgres://user@host:5432/database)');
  return url;
}

/** `text` with the URL's password (as written, and decoded) replaced by ***. */
function withoutPassword(text: string, url: URL): string {
  if (url.password === '') return text;
  const forms = new Set([url.password]);
  try {
    forms.add(decodeURIComponent(url.password));
  } catch {
    // Not valid percent-encoding: the written form is the only one.
  }
  let out = text;
  for (const form of forms) if (form !== '') out = out.replaceAll(form, '***');
  return out;
}
