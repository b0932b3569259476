import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseListen } from '../../src/config/listen.ts';
import { parseDuration, parseSize } from '../../src/config/units.ts';

describe('parseDuration', () => {
  it('converts each unit to milliseconds', () => {
    assert.equal(parseDuration('500ms'), 500);
    assert.equal(parseDuration('5s'), 5_000);
    assert.equal(parseDuration('15m'), 900_000);
    assert.equal(parseDuration('2h'), 7_200_000);
    assert.equal(parseDuration('30d'), 2_592_000_000);
  });

  it('reads a bare integer, number or string, as milliseconds', () => {
    assert.equal(parseDuration(1500), 1500);
    assert.equal(parseDuration('1500'), 1500);
    assert.equal(parseDuration(0), 0);
  });

  it('accepts fractions that come out whole, without float noise', () => {
    assert.equal(parseDuration('1.5s'), 1500);
    assert.equal(parseDuration('1.1s'), 1100);
    assert.equal(parseDuration('0.5h'), 1_800_000);
  });

  it('ignores case and surrounding or inner spaces', () => {
    assert.equal(parseDuration(' 5S '), 5_000);
    assert.equal(parseDuration('10 ms'), 10);
  });

  it('rejects garbage with a message that shows the expected form', () => {
    for (const bad of ['', 'soon', '5 seconds', '5y', '-5s', '1.5', '1.0005s', 's', '5s5', '1e3']) {
      assert.throws(() => parseDuration(bad), /expected a duration such as 500ms|not a whole number/, bad);
    }
    for (const bad of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, true, null, {}, []]) {
      assert.throws(() => parseDuration(bad), /expected a duration/, String(bad));
    }
  });

  it('rejects values beyond the safe integer range', () => {
    assert.throws(() => parseDuration('999999999999999d'), /too large/);
  });
});

describe('parseSize', () => {
  it('uses binary multiples', () => {
    assert.equal(parseSize('100b'), 100);
    assert.equal(parseSize('512kb'), 512 * 1024);
    assert.equal(parseSize('10mb'), 10 * 1024 * 1024);
    assert.equal(parseSize('1gb'), 1024 ** 3);
  });

  it('is case-insensitive', () => {
    assert.equal(parseSize('10MB'), 10 * 1024 * 1024);
    assert.equal(parseSize('16Kb'), 16_384);
  });

  it('reads a bare integer as bytes', () => {
    assert.equal(parseSize(2048), 2048);
    assert.equal(parseSize('2048'), 2048);
  });

  it('accepts fractions that come out as whole bytes only', () => {
    assert.equal(parseSize('1.5mb'), 1_572_864);
    assert.throws(() => parseSize('0.3kb'), /not a whole number of bytes/);
  });

  it('rejects garbage with a clear message', () => {
    for (const bad of ['', 'big', '10zb', '10 megabytes', '-1kb', 'mb', '1.5']) {
      assert.throws(() => parseSize(bad), /expected a size such as 100b, 512kb, 10mb, 1gb/, bad);
    }
    assert.throws(() => parseSize(-1), /expected a size/);
    assert.throws(() => parseSize(false), /expected a size.*got a boolean/);
  });
});

describe('parseListen', () => {
  it('splits host and port', () => {
    assert.deepEqual(parseListen('0.0.0.0:8080'), { host: '0.0.0.0', port: 8080 });
    assert.deepEqual(parseListen('localhost:0'), { host: 'localhost', port: 0 });
    assert.deepEqual(parseListen('svc.internal.example:443'), { host: 'svc.internal.example', port: 443 });
  });

  it('takes bracketed IPv6 and returns the host without brackets', () => {
    assert.deepEqual(parseListen('[::1]:8080'), { host: '::1', port: 8080 });
    assert.deepEqual(parseListen('[::]:0'), { host: '::', port: 0 });
  });

  it('rejects malformed addresses', () => {
    for (const bad of ['8080', ':8080', 'localhost', 'localhost:', 'localhost:http', '::1:8080', '[::1]', '[nope]:80', 'bad host:80', '-x:80']) {
      assert.throws(() => parseListen(bad), /expected host:port/, bad);
    }
  });

  it('rejects ports beyond 65535', () => {
    assert.throws(() => parseListen('127.0.0.1:65536'), /out of range/);
    assert.throws(() => parseListen('[::1]:70000'), /out of range/);
  });
});
