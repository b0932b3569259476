import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac, hkdfSync } from 'node:crypto';
import { inspect } from 'node:util';
import { Keyring } from '../../src/crypto/keyring.ts';
import { XaesKey } from '../../src/crypto/xaes.ts';

const ID = Buffer.alloc(16, 0x11);
const K1 = Buffer.alloc(32, 0x01);
const K2 = Buffer.alloc(32, 0x02);
const K3 = Buffer.alloc(32, 0x03);

test('current is the highest non-destroyed version', () => {
  const ring = new Keyring(ID, [
    { version: 2, key: K2 },
    { version: 1, key: K1 },
    { version: 3, key: Buffer.alloc(0), destroyed: true },
  ]);
  assert.equal(ring.current, 2);
  assert.equal(ring.forEncrypt().version, 2);
  assert.deepEqual(ring.versions(), [1, 2, 3]);
});

test('forDecrypt gives material or the reason it cannot', () => {
  const ring = new Keyring(
    ID,
    [
      { version: 1, key: K1 },
      { version: 2, key: K2, destroyed: true },
      { version: 3, key: K3 },
    ],
    { minDecryptionVersion: 3 },
  );
  assert.equal(ring.forDecrypt(1), 'below-minimum');
  assert.equal(ring.forDecrypt(2), 'destroyed');
  assert.equal(ring.forDecrypt(4), 'unknown-version');
  assert.equal(ring.forDecrypt(0), 'unknown-version');
  const m = ring.forDecrypt(3);
  assert.ok(typeof m !== 'string');
  assert.equal(m.version, 3);
  assert.ok(m.xaes instanceof XaesKey);
  // Built once: the same objects every time.
  assert.equal(ring.forDecrypt(3), m);
  assert.equal(ring.forEncrypt(), m);
});

test('the nonce key is HKDF-SHA256(data key, "", "svc-sidecar deterministic nonce v1")', () => {
  const ring = new Keyring(ID, [{ version: 1, key: K1 }]);
  const expected = Buffer.from(hkdfSync('sha256', K1, Buffer.alloc(0), 'svc-sidecar deterministic nonce v1', 32));
  assert.deepEqual(ring.forEncrypt().nonceKey.export(), expected);
  assert.deepEqual(
    createHmac('sha256', ring.forEncrypt().nonceKey).update('x').digest(),
    createHmac('sha256', expected).update('x').digest(),
  );
});

test('the keyring copies its id; later changes to the caller buffer do not leak in', () => {
  const id = Buffer.from(ID);
  const ring = new Keyring(id, [{ version: 1, key: K1 }]);
  id.fill(0);
  assert.deepEqual(ring.id, ID);
});

test('invalid input is rejected', () => {
  const ok = [{ version: 1, key: K1 }];
  assert.throws(() => new Keyring(Buffer.alloc(15), ok), /16 bytes/);
  assert.throws(() => new Keyring(ID, []), /at least one/);
  assert.throws(() => new Keyring(ID, [{ version: 0, key: K1 }]), /integer/);
  assert.throws(() => new Keyring(ID, [{ version: 1.5, key: K1 }]), /integer/);
  assert.throws(() => new Keyring(ID, [{ version: 2 ** 31, key: K1 }]), /integer/);
  assert.throws(() => new Keyring(ID, [{ version: 1, key: Buffer.alloc(31) }]), /32 bytes/);
  assert.throws(() => new Keyring(ID, [{ version: 1, key: K1 }, { version: 1, key: K2 }]), /twice/);
  assert.throws(() => new Keyring(ID, [{ version: 1, key: K1, destroyed: true }]), /destroyed/);
  assert.throws(() => new Keyring(ID, ok, { minDecryptionVersion: 2 }), /above the current/);
  assert.throws(() => new Keyring(ID, ok, { minDecryptionVersion: -1 }), /non-negative/);
});

test('generateKey and generateId give fresh random buffers of the right size', () => {
  assert.equal(Keyring.generateKey().length, 32);
  assert.equal(Keyring.generateId().length, 16);
  assert.notDeepEqual(Keyring.generateKey(), Keyring.generateKey());
  assert.notDeepEqual(Keyring.generateId(), Keyring.generateId());
});

test('inspect and JSON do not reveal key material', () => {
  const ring = new Keyring(ID, [{ version: 1, key: Buffer.alloc(32, 0xcd) }]);
  for (const s of [inspect(ring, { showHidden: true, depth: Infinity }), JSON.stringify(ring), inspect(ring.forEncrypt(), { depth: Infinity })]) {
    assert.ok(!s.includes('cdcdcd'), s);
  }
});

test('a keyring can take a version\'s material from an earlier keyring instead of its key', () => {
  const first = new Keyring(ID, [{ version: 1, key: K1 }], { minDecryptionVersion: 0 });
  const v1 = first.materialOf(1)!;
  const next = new Keyring(ID, [{ version: 1, key: Buffer.alloc(0), material: v1 }, { version: 2, key: K2 }], { minDecryptionVersion: 2 });
  assert.equal(next.materialOf(1), v1);
  // Below the minimum it cannot decrypt, but the material is still there for the next rebuild.
  assert.equal(next.forDecrypt(1), 'below-minimum');
  assert.equal(next.forEncrypt().version, 2);
  assert.equal(next.materialOf(3), undefined);
  // Material and version must agree.
  assert.throws(() => new Keyring(ID, [{ version: 2, key: Buffer.alloc(0), material: v1 }]), /key material of version 1 given for version 2/);
});
