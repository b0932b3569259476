/**
 * The failover rule of control-plane-urls.ts on its own: which instance is used after each
 * success and failure, and when a round (every instance failed in a row) ends.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ControlPlaneUrls, requestTimeouts, shownUrl } from '../../src/sync/control-plane-urls.ts';

const PATH = '/api/v3/sync/snapshot';

test('a failure moves to the next URL at once; a round ends only when every URL failed in a row', () => {
  const urls = new ControlPlaneUrls(['http://a:1', 'http://b:1/svc/', 'http://c:1'], PATH);
  assert.equal(urls.count, 3);
  assert.equal(urls.url, 'http://a:1/api/v3/sync/snapshot');
  assert.equal(urls.lastGood, null);

  assert.equal(urls.failed(), false, 'a then b: not a round yet');
  assert.equal(urls.index, 1);
  assert.equal(urls.url, 'http://b:1/svc/api/v3/sync/snapshot', 'the path prefix of each base is kept');
  assert.equal(urls.failed(), false);
  assert.equal(urls.index, 2);
  assert.equal(urls.failed(), true, 'a, b and c failed: the caller backs off');
  assert.equal(urls.index, 0, 'the next round starts over at the first');

  // The round count starts over after a full round, so each backoff is followed by one round.
  assert.equal(urls.failed(), false);
  assert.equal(urls.failed(), false);
  assert.equal(urls.failed(), true);
});

test('a success keeps the URL that answered and starts the round over; it reports a change of URL', () => {
  const urls = new ControlPlaneUrls(['http://a:1', 'http://b:1', 'http://c:1'], PATH);
  assert.equal(urls.succeeded(), true, 'the first answer is news');
  assert.equal(urls.lastGood, 0);
  assert.equal(urls.succeeded(), false, 'the same URL again is not');

  assert.equal(urls.failed(), false);
  assert.equal(urls.succeeded(), true, 'b answered after a failed');
  assert.equal(urls.index, 1);
  assert.equal(urls.lastGood, 1);
  assert.equal(urls.succeeded(), false);
  assert.equal(urls.index, 1, 'stays on b: no move back to a');

  // b, then c fail: two failures, not yet a round of three; a success on a resets the count.
  assert.equal(urls.failed(), false);
  assert.equal(urls.failed(), false);
  assert.equal(urls.index, 0);
  assert.equal(urls.succeeded(), true);
  assert.equal(urls.failed(), false, 'the count started over after the success');
  assert.equal(urls.failed(), false);
  assert.equal(urls.failed(), true);
});

test('with one URL every failure is a round: the backoff applies at once, as before lists existed', () => {
  const urls = new ControlPlaneUrls(['http://cp:8080'], '/api/v3/sync/logs');
  assert.equal(urls.url, 'http://cp:8080/api/v3/sync/logs');
  for (let i = 0; i < 3; i++) {
    assert.equal(urls.failed(), true);
    assert.equal(urls.index, 0);
  }
  assert.equal(urls.succeeded(), true);
  assert.equal(urls.failed(), true);
});

test('an empty list is refused (the config never gives one)', () => {
  assert.throws(() => new ControlPlaneUrls([], PATH), /at least one/);
});

test('the URL logs show has no credentials, query or fragment', () => {
  assert.equal(shownUrl('https://user:s3cret@cp.example:8443/svc/?token=t0k#x'), 'https://cp.example:8443/svc/');
  const urls = new ControlPlaneUrls(['http://a:1', 'http://u:p4ss@b:1/'], PATH);
  urls.failed();
  assert.equal(urls.shown, 'http://b:1/');
  assert.ok(!urls.shown.includes('p4ss'));
});

test('request timeouts: an interval bounds them, with a floor of a second and the former ceilings', () => {
  assert.deepEqual(requestTimeouts(5_000), { connectTimeout: 5_000, headersTimeout: 5_000, bodyTimeout: 5_000 });
  assert.deepEqual(requestTimeouts(100), { connectTimeout: 1_000, headersTimeout: 1_000, bodyTimeout: 1_000 });
  assert.deepEqual(requestTimeouts(3_600_000), { connectTimeout: 10_000, headersTimeout: 30_000, bodyTimeout: 30_000 });
  assert.deepEqual(requestTimeouts(20_000, 15_000), { connectTimeout: 10_000, headersTimeout: 15_000, bodyTimeout: 15_000 });
  assert.deepEqual(requestTimeouts(2_000, 60_000), { connectTimeout: 2_000, headersTimeout: 2_000, bodyTimeout: 2_000 });
});
