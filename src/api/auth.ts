/**
 * Login, logout and the acting user (DESIGN §9, spec 4.2). Login needs a valid API key and
 * no permission: the user it logs in brings their own. A replica refuses login (409).
 */
import { recordUserActivity } from './activity.ts';
import { PASSWORD_MAX } from '../auth/passwords.ts';
import { requireUserKey, type Caller } from '../auth/caller.ts';
import type { Services } from '../services.ts';
import { ActionUnauthorizedError, ManagedByControlPlaneError, UnauthenticatedError } from '../errors.ts';
import type { RequestContext } from '../http/context.ts';
import { readJson } from '../http/json-body.ts';
import { sendEmpty, sendJson } from '../http/respond.ts';
import type { User } from '../store/users.ts';
import { userView } from './presenters.ts';
import type { Handlers } from './routes.ts';
import { Validator } from './validation.ts';

async function login(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  requireUserKey(caller);
  // Replicas hold no login (DESIGN §13): their snapshots carry no password hash. Tokens
  // from a login on the control plane work here (the signing secret comes from the shared
  // master key).
  if (services.config.state.source === 'control-plane') throw new ManagedByControlPlaneError();
  const v = new Validator(await readJson(ctx));
  const email = v.email('email', { required: true });
  const password = v.string('password', { required: true, max: PASSWORD_MAX });
  v.check();

  const outcome = await services.auth.login(email!, password!);
  if (outcome.kind !== 'ok') {
    const reason = outcome.kind === 'disabled' ? 'the user is disabled' : outcome.user === undefined ? 'unknown email' : 'wrong password';
    // Failed logins are recorded against the key's user: they are who made the attempt.
    await recordUserActivity(ctx, services, caller.user, 'auth.login_failed', `Failed login for ${email}: ${reason}`);
    throw outcome.kind === 'disabled' ? new ActionUnauthorizedError() : new UnauthenticatedError();
  }
  await recordUserActivity(ctx, services, outcome.user, 'auth.login', `${describe(outcome.user)} logged in`);
  sendJson(ctx, 200, { access_token: outcome.issued.token, token_type: 'bearer', expires_in: outcome.issued.expiresIn });
}

async function logout(ctx: RequestContext, services: Services, caller: Caller): Promise<void> {
  await services.auth.logout(caller);
  await recordUserActivity(ctx, services, caller.user, 'auth.logout', `${describe(caller.user)} logged out`);
  sendEmpty(ctx, 204);
}

function userDetails(ctx: RequestContext, services: Services, caller: Caller): void {
  sendJson(ctx, 200, userView(services.store, caller.user));
}

function describe(user: User): string {
  return `${user.name} (${user.email})`;
}


/** The handlers of this module's routes (route-table.ts), by name. */
export const handlers = { login, logout, userDetails } satisfies Handlers;
