import assert from 'node:assert/strict';
import { it } from 'node:test';
import type { Config } from '../../src/config/load.ts';
import type { EgressRoute, Permission, RelayRoute, Role, SeedConfiguration, SeedUser } from '../../src/config/schema.ts';

// Compile-time checks: `tsc --noEmit` fails if the Config type drifts from what the other
// modules are written against. The runtime assertion only keeps the file a test.
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;

const shape: [
  Equal<Config['server']['listen'], string>,
  Equal<Config['server']['public_url'], string | undefined>,
  Equal<Config['server']['body_limit'], number>,
  Equal<Config['server']['headers_timeout'], number>,
  Equal<Config['state']['source'], 'local' | 'file' | 'control-plane'>,
  Equal<NonNullable<Config['state']['control_plane']>['poll_interval'], number>,
  Equal<NonNullable<Config['state']['control_plane']>['api_key'], string | undefined>,
  Equal<NonNullable<Config['state']['control_plane']>['url'], readonly string[] | undefined>,
  Equal<Config['logging']['level'], 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent'>,
  Equal<SeedUser['roles'], readonly Role[]>,
  Equal<SeedUser['disabled'], boolean | undefined>,
  Equal<Config['seed']['api_keys'][number]['permissions'], readonly Permission[]>,
  Equal<SeedConfiguration['type'], 'encryption' | 'provider'>,
  Equal<SeedConfiguration['deterministic'], boolean>,
  Equal<SeedConfiguration['min_decryption_version'], number | undefined>,
  Equal<RelayRoute['match']['method'], string | undefined>,
  Equal<EgressRoute['destination'], string>,
  Equal<Config['relay'] extends undefined ? never : 'may be absent', 'may be absent'>,
] = [true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true];

it('Config has the documented shape (checked by tsc)', () => {
  assert.ok(shape.every((check) => check));
});
