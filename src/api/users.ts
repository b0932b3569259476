/**
 * Users and roles (DESIGN §9, §10; spec 2.4, 2.5). Roles are built in, so they are only
 * listed: a plain array, since there are four of them and a page envelope would only add
 * noise. Passwords are stored scrypt-hashed and never shown.
 */
import { recordActivity } from './activity.ts';
import type { Caller } from '../auth/caller.ts';
import { authorizeMinting, authorizeOwnerRole, authorizePermissions, identityReach } from '../auth/minting.ts';
import { hashPasswordAsync, PASSWORD_MAX } from '../auth/passwords.ts';
import type { Services } from '../services.ts';
import { ValidationError } from '../errors.ts';
import type { RequestContext } from '../http/context.ts';
import { readJson } from '../http/json-body.ts';
import { sendJson } from '../http/respond.ts';
import type { Store } from '../store/db.ts';
import { stateOf } from '../store/state-view.ts';
import type { Role } from '../store/roles.ts';
import { isUniqueViolation } from '../store/sql.ts';
import type { User } from '../store/users.ts';
import { envelope, pageRequest, pastTheEnd } from './pagination.ts';
import { roleView, userView } from './presenters.ts';
import type { Handlers } from './routes.ts';
import { attributeName, Validator } from './validation.ts';


/** More role entries than there are roles can only be a mistake or an attack. */
const ROLES_MAX = 16;

const NAME_MAX = 255;
const PASSWORD_MIN = 12;
/** scrypt's cost grows with the input; nobody types more than this. */

/** The handlers of this module's routes (route-table.ts), by name. */
export const handlers = { list, create, listRoles } satisfies Handlers;

async function list(ctx: RequestContext, services: Services): Promise<void> {
  const v = Validator.forQuery(ctx.query());
  const page = pageRequest(v);
  v.check();
  const { store } = services;
  const total = await store.users.count();
  const data = pastTheEnd(page, total) ? [] : (await store.users.page(page.perPage, page.offset)).map((user) => userView(store, user));
  sendJson(ctx, 200, envelope(ctx, services.config.server.public_url, page, total, data));
}

async function create(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  const v = new Validator(await readJson(ctx));
  const input = validateCreate(v, services.store);
  v.check();
  const exempt = authorizeUser(services.store, caller, input);
  // Hashed on the thread pool: scrypt on the event loop would stall every request for it.
  const passwordHash = input.password === undefined ? null : await hashPasswordAsync(input.password);
  const user = await insert(services.store, input, passwordHash);
  const roles = input.roles.length === 0 ? '' : ` with roles ${input.roles.map((r) => r.name).join(', ')}`;
  await recordActivity(ctx, services, caller, 'user.created', `Created user ${user.email}${roles}.${exempt ?? ''}`);
  sendJson(ctx, 201, userView(services.store, user));
}

async function listRoles(ctx: RequestContext, services: Services): Promise<void> {
  sendJson(ctx, 200, (await services.store.roles.list()).map(roleView));
}

// ---------------------------------------------------------------------------------------
// Steps

interface CreateInput {
  name: string;
  email: string;
  password: string | undefined;
  roles: Role[];
}

function validateCreate(v: Validator, store: Store): CreateInput {
  const name = v.string('name', { required: true, max: NAME_MAX, text: true });
  const email = v.email('email', { required: true });
  if (email !== undefined && stateOf(store).userByEmail(email) !== undefined) v.fail('email', 'The email has already been taken.');
  const password = v.string('password', { min: PASSWORD_MIN, max: PASSWORD_MAX });
  const roles = v.array('roles', (value, key) => {
    const role = typeof value === 'string' ? stateOf(store).roleByName(value) : Number.isSafeInteger(value) ? stateOf(store).role(value as number) : undefined;
    if (role === undefined) v.fail(key, `The selected ${attributeName(key)} is invalid.`);
    return role;
  }, { max: ROLES_MAX });
  const unique = new Map((roles ?? []).map((r) => [r.id, r]));
  return { name: name ?? '', email: email ?? '', password: password ?? undefined, roles: [...unique.values()] };
}

async function insert(store: Store, input: CreateInput, passwordHash: string | null): Promise<User> {
  try {
    return await store.users.create({
      name: input.name,
      email: input.email,
      passwordHash,
      roleIds: input.roles.map((r) => r.id),
    });
  } catch (err) {
    // Another writer of the same database file took the email after we checked.
    if (isUniqueViolation(err)) throw new ValidationError({ email: ['The email has already been taken.'] });
    throw err;
  }
}

/**
 * Nobody creates a user who could do more than the caller can (DESIGN §13, auth/minting.ts):
 * no permission the caller lacks, and nothing to decrypt that the caller cannot — the new
 * user is admitted by the roles it is given and by provider groups that list its email (a
 * new id is never listed: ids are not reused). A user's login is limited to no
 * configurations, so a caller limited to some cannot create a user who decrypts. Returns
 * the owner's exemption note for the activity entry.
 */
function authorizeUser(store: Store, caller: Caller, input: CreateInput): string | null {
  const permissions = new Set(input.roles.flatMap((role) => role.permissions));
  authorizePermissions(caller, permissions);
  const identity = { userId: null, roleIds: input.roles.map((r) => r.id), email: input.email };
  authorizeOwnerRole(store, caller, identity.roleIds);
  return authorizeMinting(store, caller, identityReach(store, identity, permissions, []));
}

