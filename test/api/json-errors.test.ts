/**
 * A management request whose body is not JSON gets a 400 that says what is wrong and
 * where, and never any part of the body: these bodies carry passwords and keys.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { call, startApp } from '../support/app.ts';

const PREFIX = 'The request body is not valid JSON: ';

const CASES: Array<[body: string, detail: string]> = [
  ['{"email":"ada@example.com","password": hunter2}', 'an unexpected character where a value was expected at byte 39'],
  ['password=hunter2', 'the top-level value must be an object or an array at byte 0'],
  ['hunter2', 'the top-level value must be an object or an array at byte 0'],
  ['{"password":"hunter2",}', 'an unexpected character where an object key was expected at byte 22'],
  ['{"password":"hunter2"', 'unexpected end of input at byte 21'],
  ['{"password":"hun\\qter2"}', 'an invalid escape sequence at byte 17'],
  ['{"password":"hun\u0001ter2"}', 'a control character inside a string at byte 16'],
  ['{"password":"hunter2"} hunter2', 'unexpected data after the top-level value at byte 23'],
  ['{"password":hunter2x}', 'an unexpected character where a value was expected at byte 12'],
  ['{"password":tru}', 'an invalid literal at byte 15'],
  [`{"password":"${'hunter2'.repeat(20)}" "x"}`, 'a missing "," or "}" in an object at byte 155'],
];

test('unparseable JSON on the management API answers 400 naming the byte, never echoing the body', async (t) => {
  const running = await startApp(t);
  for (const path of ['/api/v2/auth/login', '/api/v3/users', '/api/v3/classifications']) {
    for (const [body, detail] of CASES) {
      const res = await call(running.url, path, { body });
      assert.equal(res.status, 400, `${path} ${body}`);
      assert.deepEqual(res.json, { message: `${PREFIX}${detail}.` }, `${path} ${body}`);
      assert.ok(!res.text.includes('hunter') && !res.text.includes('password'), res.text);
    }
  }
  assert.ok(!running.logs().includes('hunter2'), 'nor in the logs');
});
