/**
 * Data keys at rest: each is wrapped under the master key with the configuration id and
 * key version as associated data, so a wrapped key copied to another row or version
 * fails to unwrap instead of silently decrypting the wrong configuration's data.
 */
import type { MasterKey } from './master-key.ts';

function aad(configurationId: string, version: number): string {
  return `svc-sidecar data key|${configurationId}|${version}`;
}

export function wrapDataKey(master: MasterKey, configurationId: string, version: number, key: Buffer): Buffer {
  return master.wrap(key, aad(configurationId, version));
}

export function unwrapDataKey(master: MasterKey, configurationId: string, version: number, wrapped: Buffer): Buffer {
  return master.unwrap(wrapped, aad(configurationId, version));
}
