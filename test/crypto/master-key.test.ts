import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { loadMasterKey, MasterKey } from '../../src/crypto/master-key.ts';

const KEY = Buffer.alloc(32, 0x5a);
const KEY_B64 = KEY.toString('base64');

function tempDir(t: { after: (fn: () => void) => void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-master-key-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test('SVC_MASTER_KEY wins over the key file and nothing is written', (t) => {
  const dir = tempDir(t);
  const file = join(dir, 'sub', 'master.key');
  let generated = false;
  const mk = loadMasterKey({ env: { SVC_MASTER_KEY: KEY_B64 }, file, onGenerated: () => (generated = true) });
  assert.equal(mk.source, 'env');
  assert.equal(generated, false);
  assert.throws(() => statSync(file), { code: 'ENOENT' });
  assert.equal(mk.fingerprint(), new MasterKey(KEY).fingerprint());
});

test('SVC_MASTER_KEY accepts surrounding whitespace, base64url and a missing pad', () => {
  const fp = new MasterKey(KEY).fingerprint();
  const odd = Buffer.alloc(32, 0xfb); // encodes with '+' and '/' characters
  for (const text of [`${KEY_B64}\n`, KEY_B64.replace('=', '')]) {
    assert.equal(loadMasterKey({ env: { SVC_MASTER_KEY: text }, file: '/nonexistent/x' }).fingerprint(), fp);
  }
  const url = odd.toString('base64url');
  assert.equal(
    loadMasterKey({ env: { SVC_MASTER_KEY: url }, file: '/nonexistent/x' }).fingerprint(),
    new MasterKey(odd).fingerprint(),
  );
});

test('a bad SVC_MASTER_KEY is refused without echoing the value', () => {
  const bad = [
    '',
    Buffer.alloc(31, 1).toString('base64'),
    Buffer.alloc(33, 1).toString('base64'),
    `${KEY_B64.slice(0, 42)}B=`, // non-canonical trailing bits
    `${KEY_B64.slice(0, 10)}*${KEY_B64.slice(11)}`,
    'hunter2-hunter2-hunter2-hunter2-hunter2-hunter2',
  ];
  for (const value of bad) {
    assert.throws(
      () => loadMasterKey({ env: { SVC_MASTER_KEY: value }, file: '/nonexistent/x' }),
      (err: Error) => {
        assert.match(err.message, /SVC_MASTER_KEY/);
        if (value.trim() !== '') assert.ok(!err.message.includes(value.trim()), 'message echoes the value');
        assert.ok(!err.message.includes('hunter2'));
        return true;
      },
    );
  }
});

test('without env or file a key file is generated with mode 0600, then reused', (t) => {
  const dir = tempDir(t);
  const file = join(dir, 'nested', 'dir', 'master.key');
  const generatedPaths: string[] = [];
  const first = loadMasterKey({ env: {}, file, onGenerated: (p) => generatedPaths.push(p) });
  assert.deepEqual(generatedPaths, [file]);
  assert.equal(first.source, 'generated');
  assert.equal(first.insecurePermissions, false);
  if (process.platform !== 'win32') assert.equal(statSync(file).mode & 0o777, 0o600);
  const text = readFileSync(file, 'utf8');
  assert.match(text, /^[A-Za-z0-9+/]{43}=\n$/);
  assert.equal(Buffer.from(text, 'base64').length, 32);

  const second = loadMasterKey({ env: {}, file, onGenerated: (p) => generatedPaths.push(p) });
  assert.equal(second.source, 'file');
  assert.equal(generatedPaths.length, 1);
  assert.equal(second.fingerprint(), first.fingerprint());
  // Tokens wrapped by the first instance open with the second.
  const wrapped = first.wrap(Buffer.alloc(32, 3), 'cfg:1');
  assert.deepEqual(second.unwrap(wrapped, 'cfg:1'), Buffer.alloc(32, 3));
});

test('a key file with group/other permissions still loads and is flagged', { skip: process.platform === 'win32' }, (t) => {
  const dir = tempDir(t);
  const file = join(dir, 'master.key');
  writeFileSync(file, `${KEY_B64}  \n\n`);
  chmodSync(file, 0o644);
  const mk = loadMasterKey({ env: {}, file });
  assert.equal(mk.source, 'file');
  assert.equal(mk.insecurePermissions, true);
  assert.equal(mk.fingerprint(), new MasterKey(KEY).fingerprint());
  chmodSync(file, 0o600);
  assert.equal(loadMasterKey({ env: {}, file }).insecurePermissions, false);
});

test('a key file with bad content is refused without echoing it', (t) => {
  const dir = tempDir(t);
  const file = join(dir, 'master.key');
  writeFileSync(file, 'not-a-key-at-all-secretish', { mode: 0o600 });
  assert.throws(
    () => loadMasterKey({ env: {}, file }),
    (err: Error) => err.message.includes(file) && !err.message.includes('secretish'),
  );
  writeFileSync(file, ` ${KEY_B64}`); // leading whitespace is not allowed
  assert.throws(() => loadMasterKey({ env: {}, file }), /base64 encoding of exactly 32 bytes/);
});

test('wrap/unwrap round trip; format is version | nonce | ct | tag', () => {
  const mk = new MasterKey(KEY);
  const dataKey = Buffer.alloc(32, 7);
  const wrapped = mk.wrap(dataKey, 'config-1:v1');
  assert.equal(wrapped.length, 1 + 12 + 32 + 16);
  assert.equal(wrapped[0], 0x01);
  assert.ok(!wrapped.includes(dataKey));
  assert.deepEqual(mk.unwrap(wrapped, 'config-1:v1'), dataKey);
  // Random nonce: wrapping twice differs.
  assert.notDeepEqual(mk.wrap(dataKey, 'config-1:v1'), wrapped);
});

test('unwrap fails with the same message on wrong aad, key, tampering or format', () => {
  const mk = new MasterKey(KEY);
  const wrapped = mk.wrap(Buffer.alloc(32, 7), 'config-1:v1');
  const fails = (fn: () => unknown) => assert.throws(fn, { message: 'unwrap failed' });
  fails(() => mk.unwrap(wrapped, 'config-1:v2'));
  fails(() => mk.unwrap(wrapped, 'config-2:v1'));
  fails(() => new MasterKey(Buffer.alloc(32, 1)).unwrap(wrapped, 'config-1:v1'));
  for (let i = 0; i < wrapped.length; i++) {
    const copy = Buffer.from(wrapped);
    copy[i] = copy[i]! ^ 0x80;
    fails(() => mk.unwrap(copy, 'config-1:v1'));
  }
  fails(() => mk.unwrap(wrapped.subarray(0, 28), 'config-1:v1'));
  fails(() => mk.unwrap(Buffer.alloc(0), 'config-1:v1'));
});

test('fingerprint is 16 hex chars, stable, and key-dependent', () => {
  const a = new MasterKey(KEY);
  assert.match(a.fingerprint(), /^[0-9a-f]{16}$/);
  assert.equal(a.fingerprint(), new MasterKey(KEY).fingerprint());
  assert.notEqual(a.fingerprint(), new MasterKey(Buffer.alloc(32, 1)).fingerprint());
  assert.ok(!KEY.toString('hex').includes(a.fingerprint()));
});

test('deriveSecret is deterministic per label and length', () => {
  const mk = new MasterKey(KEY);
  assert.equal(mk.deriveSecret('jwt').length, 32);
  assert.deepEqual(mk.deriveSecret('jwt'), mk.deriveSecret('jwt'));
  assert.notDeepEqual(mk.deriveSecret('jwt'), mk.deriveSecret('other'));
  assert.equal(mk.deriveSecret('jwt', 64).length, 64);
  assert.notDeepEqual(mk.deriveSecret('jwt'), KEY);
  assert.throws(() => mk.deriveSecret('jwt', 0), RangeError);
});

test('inspect, JSON and string forms never reveal the key', () => {
  const mk = new MasterKey(KEY);
  const shown = [
    inspect(mk),
    inspect(mk, { showHidden: true, depth: Infinity }),
    inspect({ nested: { mk } }),
    JSON.stringify({ mk }),
    String(mk),
    `${mk}`,
  ];
  for (const s of shown) {
    assert.ok(s.includes('redacted'), s);
    assert.ok(!s.includes(KEY_B64) && !s.includes(KEY.toString('hex')) && !s.includes('5a5a5a'), s);
  }
  assert.throws(() => new MasterKey(Buffer.alloc(31)), RangeError);
});
