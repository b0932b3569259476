import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MethodNotAllowedError } from '../../src/errors.ts';
import { Router } from '../../src/http/router.ts';

function allowOf(router: Router<string>, method: string, path: string): string | undefined {
  try {
    router.find(method, path);
  } catch (err) {
    if (err instanceof MethodNotAllowedError) return err.headers?.['allow'];
    throw err;
  }
  return undefined;
}

test('405 Allow names HEAD wherever GET answers the path, and only there', () => {
  const router = new Router<string>().add('GET', '/items', 'list').add('POST', '/items', 'create').add('POST', '/actions', 'act').add('GET', '/both', 'get').add('HEAD', '/both', 'head');
  assert.equal(router.find('HEAD', '/items').handler, 'list', 'HEAD is answered by GET');
  assert.equal(allowOf(router, 'PUT', '/items'), 'GET, HEAD, POST');
  assert.equal(allowOf(router, 'GET', '/actions'), 'POST');
  assert.equal(allowOf(router, 'HEAD', '/actions'), 'POST');
  assert.equal(allowOf(router, 'DELETE', '/both'), 'GET, HEAD', 'a route of its own for HEAD is not listed twice');
});
