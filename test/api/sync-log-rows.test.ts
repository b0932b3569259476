/**
 * `POST /api/v3/sync/logs` holds shipped rows to what the log lists show (the
 * SyncApiLogRow and SyncUsageLogRow schemas of the OpenAPI document): a row the lists
 * could not show is refused with 422 on its field, and nothing of the batch is stored.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { call, startApp } from '../support/app.ts';

const LOGS = '/api/v3/sync/logs';
const UUID = '0b7e9b3c-59a4-4c1e-8f65-8f1c1f1c1f1c';

const API_ROW = {
  id: 1,
  request_id: 'shipped-1',
  method: 'POST',
  path: '/proxy/payments',
  status_code: 200,
  api_key_id: UUID,
  user_id: 1,
  configuration_id: UUID,
  destination: null,
  duration_ms: 1.5,
  ip: '10.0.0.1',
  created_at: '2026-01-01T00:00:00.000Z',
};
const USAGE_ROW = { id: 1, request_id: 'shipped-1', configuration_id: UUID, api_key_id: null, user_id: null, mode: 'encrypt', field_count: 1, bytes: 10, created_at: API_ROW.created_at };

test('shipped log rows with a status outside 100–599, an unknown method, ids that are no ids or a time that is not ISO are refused with 422', async (t) => {
  const { url } = await startApp(t);
  const refused: Array<[string, Record<string, unknown>, 'api' | 'usage', string]> = [
    ['status 0', { status_code: 0 }, 'api', 'api.0.status_code'],
    ['status 600', { status_code: 600 }, 'api', 'api.0.status_code'],
    ['status 999', { status_code: 999 }, 'api', 'api.0.status_code'],
    ['an unknown method', { method: 'BREW' }, 'api', 'api.0.method'],
    ['a lower-case method', { method: 'post' }, 'api', 'api.0.method'],
    ['a key id that is no UUID', { api_key_id: 'key-1' }, 'api', 'api.0.api_key_id'],
    ['a configuration id that is no UUID', { configuration_id: 'payments' }, 'api', 'api.0.configuration_id'],
    ['a request id with spaces', { request_id: 'a b' }, 'api', 'api.0.request_id'],
    ['a time that is not ISO 8601', { created_at: 'Thu, 01 Jan 2026 00:00:00 GMT' }, 'api', 'api.0.created_at'],
    ['a date without a time', { created_at: '2026-01-01' }, 'api', 'api.0.created_at'],
    ['a usage configuration id that is no UUID', { configuration_id: 'payments' }, 'usage', 'usage.0.configuration_id'],
    ['a usage time that is not ISO 8601', { created_at: 'yesterday' }, 'usage', 'usage.0.created_at'],
  ];
  for (const [what, change, kind, field] of refused) {
    const row = { ...(kind === 'api' ? API_ROW : USAGE_ROW), ...change };
    const res = await call(url, LOGS, { body: JSON.stringify({ replica: 'r1', [kind]: [row] }) });
    assert.equal(res.status, 422, what);
    assert.deepEqual(Object.keys(res.json.errors), [field], what);
  }
  // Nothing of a refused batch was stored: the good rows go in now, none counted as duplicates.
  const good = await call(url, LOGS, { body: JSON.stringify({ replica: 'r1', api: [API_ROW], usage: [USAGE_ROW] }) });
  assert.deepEqual(good.json, { stored: 2, duplicates: 0 });
  // Offsets and every method Node's parser accepts are fine.
  const more = await call(url, LOGS, { body: JSON.stringify({ replica: 'r1', api: [{ ...API_ROW, id: 2, method: 'PROPFIND', status_code: 599, created_at: '2026-01-01T01:00:00+01:00' }] }) });
  assert.deepEqual(more.json, { stored: 1, duplicates: 0 });
});

test('a shipped batch that is not a JSON object is a 400, as on every other endpoint', async (t) => {
  const { url } = await startApp(t);
  for (const body of ['[]', '[{"replica":"r1"}]', '"r1"', 'null']) {
    const res = await call(url, LOGS, { body });
    assert.equal(res.status, 400, body);
    assert.deepEqual(res.json, { message: 'The request body must be a JSON object.' }, body);
  }
});
