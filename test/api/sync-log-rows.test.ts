/**
 * `POST /api/v3/sync/logs` answers a body that is no JSON object as every endpoint does.
 * What a row may hold is test/sync/fleet-logs.test.ts's table of near misses.
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

test('a shipped batch that is not a JSON object is a 400, as on every other endpoint', async (t) => {
  const { url } = await startApp(t);
  for (const body of ['[]', '[{"replica":"r1"}]', '"r1"', 'null']) {
    const res = await call(url, LOGS, { body });
    assert.equal(res.status, 400, body);
    assert.deepEqual(res.json, { message: 'The request body must be a JSON object.' }, body);
  }
});
