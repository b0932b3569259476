/**
 * The store's contract: everything the rest of the program may rely on from a store,
 * whatever holds it. A backend's runner (test/store/sqlite.test.ts) calls
 * runStoreContract once per way of opening it.
 */
import { describe } from 'node:test';
import { apiKeysContract } from './api-keys.ts';
import { classificationsContract } from './classifications.ts';
import { configurationsContract } from './configurations.ts';
import { identityContract } from './identity.ts';
import { logsContract } from './logs.ts';
import { rolesContract } from './roles.ts';
import { seedContract } from './seed.ts';
import type { StoreTarget } from './target.ts';
import { transactionsContract } from './transactions.ts';
import { usersContract } from './users.ts';

export type { StoreTarget } from './target.ts';

export function runStoreContract(target: StoreTarget): void {
  describe(`store contract: ${target.name}`, { skip: target.skip ?? false }, () => {
    describe('roles', () => rolesContract(target));
    describe('users', () => usersContract(target));
    describe('api keys', () => apiKeysContract(target));
    describe('configurations', () => configurationsContract(target));
    describe('classifications', () => classificationsContract(target));
    describe('identity', () => identityContract(target));
    describe('logs', () => logsContract(target));
    describe('transactions', () => transactionsContract(target));
    describe('seed', () => seedContract(target));
  });
}
