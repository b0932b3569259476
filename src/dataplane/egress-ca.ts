/**
 * The egress proxy's installation CA (DESIGN §15): read from `egress_proxy.ca`, or created
 * there on first start (directory 0700, key 0600) before the process reports healthy; and
 * the per-host leaf certificates it signs, made on demand and kept as TLS contexts.
 */
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { createSecureContext, type SecureContext } from 'node:tls';
import { LRUCache } from 'lru-cache';
import { createCertificateAuthority, issueLeafCertificate, readCertificateAuthority, type CertificateAuthority } from '../crypto/certificates.ts';
import { EgressCaError } from '../errors.ts';

export interface CaFiles {
  readonly cert_file: string;
  readonly key_file: string;
}

export const CA_COMMON_NAME = 'svc-sidecar egress proxy CA';

export interface LoadedCa {
  readonly ca: CertificateAuthority;
  /** True when this call created the files. */
  readonly created: boolean;
  /** The key file is readable or writable by others than its owner. */
  readonly insecurePermissions: boolean;
  /**
   * `finished`: a rotation had stopped between its two renames and this call finished it
   * (the new pair is in place); `discarded`: one had stopped before them and its unused
   * files were removed (the old pair stands).
   */
  readonly interruptedRotation: 'finished' | 'discarded' | null;
}

/**
 * The CA in `files`, created when neither file exists. One file without the other is
 * refused rather than completed: a new key beside an old certificate (or the reverse)
 * would break every client that trusts the old one, silently. A rotation that stopped
 * part way is finished or undone first (finishRotation); a key that does not belong to
 * the certificate is refused.
 */
export async function loadOrCreateCa(files: CaFiles): Promise<LoadedCa> {
  const certExists = existsSync(files.cert_file);
  const keyExists = existsSync(files.key_file);
  if (!certExists && !keyExists) {
    await writeCa(files, false);
    return { ca: readCa(files), created: true, insecurePermissions: false, interruptedRotation: null };
  }
  if (!certExists || !keyExists) {
    throw new EgressCaError(files.cert_file, files.key_file, `${certExists ? files.key_file : files.cert_file} is missing while the other file exists; restore it, or remove both to have a new CA created`);
  }
  const interruptedRotation = finishRotation(files);
  return { ca: readCa(files), created: false, insecurePermissions: (statSync(files.key_file).mode & 0o077) !== 0, interruptedRotation };
}

/**
 * Replaces the CA with a new one (`svc-sidecar egress-ca --rotate`). Both files are
 * written beside their places (`.new`) and synced, then the certificate is renamed over
 * its file and the key over its own, then the directory is synced. Whatever step a crash
 * stops at, the files on disk are the old pair, the new pair, or the new certificate with
 * the old key beside the new key's `.new` file, which the next start finishes
 * (finishRotation); a reader never sees half a file.
 */
export async function rotateCa(files: CaFiles): Promise<CertificateAuthority> {
  await writeCa(files, true);
  return readCa(files);
}

function readCa(files: CaFiles): CertificateAuthority {
  try {
    return readCertificateAuthority(readFileSync(files.cert_file, 'utf8'), readFileSync(files.key_file, 'utf8'));
  } catch (err) {
    const leftovers = [pending(files.cert_file), pending(files.key_file)].filter((file) => existsSync(file));
    const hint = leftovers.length === 0 ? '' : ` (and ${leftovers.join(' and ')}, left by an interrupted rotation, pair with neither file)`;
    throw new EgressCaError(files.cert_file, files.key_file, `${(err as Error).message}${hint}; restore the pair, or run svc-sidecar egress-ca --rotate for a new one`, err);
  }
}

/** Where rotation writes a file before renaming it into place. */
function pending(file: string): string {
  return `${file}.new`;
}

/**
 * A rotation's `.new` files left beside the CA: with the pair in place matching, the
 * rotation stopped before renaming anything, and they are removed (`discarded`); with it
 * not matching, the one whose other half is already in place is renamed after it
 * (`finished`) — the key after the certificate, as rotateCa renames them, or the
 * certificate after the key, as earlier versions did. Null when there is nothing left,
 * or nothing that pairs (then readCa refuses the files).
 */
function finishRotation(files: CaFiles): 'finished' | 'discarded' | null {
  const certNew = pending(files.cert_file);
  const keyNew = pending(files.key_file);
  if (!existsSync(certNew) && !existsSync(keyNew)) return null;
  try {
    if (pairs(files.cert_file, files.key_file)) {
      rmSync(certNew, { force: true });
      rmSync(keyNew, { force: true });
      return 'discarded';
    }
    if (existsSync(keyNew) && pairs(files.cert_file, keyNew)) {
      renameSync(keyNew, files.key_file);
      rmSync(certNew, { force: true });
    } else if (existsSync(certNew) && pairs(certNew, files.key_file)) {
      renameSync(certNew, files.cert_file);
      rmSync(keyNew, { force: true });
    } else {
      return null;
    }
    syncDirectories(files);
    return 'finished';
  } catch (err) {
    throw new EgressCaError(files.cert_file, files.key_file, `an interrupted rotation cannot be finished (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, err);
  }
}

function pairs(certFile: string, keyFile: string): boolean {
  try {
    readCertificateAuthority(readFileSync(certFile, 'utf8'), readFileSync(keyFile, 'utf8'));
    return true;
  } catch {
    return false;
  }
}

async function writeCa(files: CaFiles, replace: boolean): Promise<void> {
  const issued = await createCertificateAuthority(CA_COMMON_NAME);
  try {
    for (const dir of new Set([dirname(files.cert_file), dirname(files.key_file)])) mkdirSync(dir, { recursive: true, mode: 0o700 });
    if (replace) {
      // Certificate first: a crash between the renames leaves the new certificate in
      // place with its key beside it, which the next start finishes.
      writeDurably(pending(files.key_file), issued.key, 0o600);
      writeDurably(pending(files.cert_file), issued.cert, 0o644);
      syncDirectories(files);
      renameSync(pending(files.cert_file), files.cert_file);
      renameSync(pending(files.key_file), files.key_file);
      syncDirectories(files);
    } else {
      // `wx`: never overwrite a file that appeared meanwhile (another process starting).
      writeFileSync(files.key_file, issued.key, { mode: 0o600, flag: 'wx' });
      writeFileSync(files.cert_file, issued.cert, { mode: 0o644, flag: 'wx' });
    }
  } catch (err) {
    throw new EgressCaError(files.cert_file, files.key_file, `the files cannot be written (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, err);
  }
}

/** A new file (any earlier one at `path` removed first, so `mode` applies), synced to disk. */
function writeDurably(path: string, data: string, mode: number): void {
  rmSync(path, { force: true });
  const fd = openSync(path, 'wx', mode);
  try {
    writeFileSync(fd, data);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Syncs the directories of both files, so that their renames are on disk too. */
function syncDirectories(files: CaFiles): void {
  for (const dir of new Set([dirname(files.cert_file), dirname(files.key_file)])) {
    const fd = openSync(dir, 'r');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  }
}

/** Leaf contexts kept at most; each is one P-256 key and certificate. */
const MAX_LEAVES = 1_000;
/** Leaves are valid 30 days; one is made again well before it ends. */
const LEAF_TTL_MS = 24 * 60 * 60 * 1000;

/**
 * TLS contexts for the hosts the proxy terminates, one leaf certificate per host, made on
 * first use and cached (lru-cache). Making one is asynchronous (a P-256 key and one
 * WebCrypto signature); the cache's `fetch` keeps one generation in flight per host, so
 * concurrent CONNECTs to a new host wait for the same leaf instead of each making one.
 * A generation that fails is not cached: the next CONNECT tries again.
 */
export class LeafCertificates {
  private readonly cache: LRUCache<string, SecureContext>;

  constructor(ca: CertificateAuthority) {
    this.cache = new LRUCache<string, SecureContext>({
      max: MAX_LEAVES,
      ttl: LEAF_TTL_MS,
      fetchMethod: async (host) => {
        const leaf = await issueLeafCertificate(ca, host);
        return createSecureContext({ key: leaf.key, cert: leaf.cert, minVersion: 'TLSv1.2' });
      },
    });
  }

  /** `host`: a DNS name in lower case, or an IP literal (IPv6 without brackets). */
  async context(host: string): Promise<SecureContext> {
    const context = await this.cache.fetch(host);
    // Only an aborted fetch resolves to nothing, and nothing here aborts one.
    if (context === undefined) throw new Error(`no certificate was made for ${host}`);
    return context;
  }
}
