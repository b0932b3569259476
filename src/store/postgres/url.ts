/**
 * A PostgreSQL store's URL, as the configuration and the command line take it and as
 * messages show it. No driver is loaded here: the CLI and the configuration use it without
 * the `pg` package.
 */

const PROTOCOLS: ReadonlySet<string> = new Set(['postgres:', 'postgresql:']);

/** The URL `text` names, when it is a postgres:// URL with a host; else null. */
export function postgresUrl(text: string): URL | null {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return null;
  }
  return PROTOCOLS.has(url.protocol) && url.hostname !== '' ? url : null;
}

/** The URL as messages show it: the password, if any, as ***. */
export function redactedUrl(url: string | URL): string {
  const parsed = typeof url === 'string' ? postgresUrl(url) : new URL(url.href);
  if (parsed === null) return 'postgres://';
  if (parsed.password !== '') parsed.password = '***';
  return parsed.href;
}
