/**
 * The egress proxy's installation CA (DESIGN §15): read from `egress_proxy.ca`, or created
 * there on first start (directory 0700, key 0600) before the process reports healthy; and
 * the per-host leaf certificates it signs, made on demand and kept as TLS contexts.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
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
}

/**
 * The CA in `files`, created when neither file exists. One file without the other is
 * refused rather than completed: a new key beside an old certificate (or the reverse)
 * would break every client that trusts the old one, silently.
 */
export async function loadOrCreateCa(files: CaFiles): Promise<LoadedCa> {
  const certExists = existsSync(files.cert_file);
  const keyExists = existsSync(files.key_file);
  if (!certExists && !keyExists) {
    await writeCa(files, false);
    return { ca: readCa(files), created: true, insecurePermissions: false };
  }
  if (!certExists || !keyExists) {
    throw new EgressCaError(files.cert_file, files.key_file, `${certExists ? files.key_file : files.cert_file} is missing while the other file exists; restore it, or remove both to have a new CA created`);
  }
  return { ca: readCa(files), created: false, insecurePermissions: (statSync(files.key_file).mode & 0o077) !== 0 };
}

/**
 * Replaces the CA with a new one (`svc-sidecar egress-ca --rotate`). Each file is written
 * beside its place and renamed over it, so a reader never sees half a file.
 */
export async function rotateCa(files: CaFiles): Promise<CertificateAuthority> {
  await writeCa(files, true);
  return readCa(files);
}

function readCa(files: CaFiles): CertificateAuthority {
  try {
    return readCertificateAuthority(readFileSync(files.cert_file, 'utf8'), readFileSync(files.key_file, 'utf8'));
  } catch (err) {
    throw new EgressCaError(files.cert_file, files.key_file, (err as Error).message, err);
  }
}

async function writeCa(files: CaFiles, replace: boolean): Promise<void> {
  const issued = await createCertificateAuthority(CA_COMMON_NAME);
  try {
    for (const dir of new Set([dirname(files.cert_file), dirname(files.key_file)])) mkdirSync(dir, { recursive: true, mode: 0o700 });
    if (replace) {
      const keyTemp = `${files.key_file}.new`;
      const certTemp = `${files.cert_file}.new`;
      writeFileSync(keyTemp, issued.key, { mode: 0o600 });
      chmodSync(keyTemp, 0o600);
      writeFileSync(certTemp, issued.cert, { mode: 0o644 });
      renameSync(keyTemp, files.key_file);
      renameSync(certTemp, files.cert_file);
    } else {
      // `wx`: never overwrite a file that appeared meanwhile (another process starting).
      writeFileSync(files.key_file, issued.key, { mode: 0o600, flag: 'wx' });
      writeFileSync(files.cert_file, issued.cert, { mode: 0o644, flag: 'wx' });
    }
  } catch (err) {
    throw new EgressCaError(files.cert_file, files.key_file, `the files cannot be written (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, err);
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
