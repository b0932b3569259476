import type { Caller } from '../auth/caller.ts';
import type { Services } from '../dataplane/services.ts';
import type { RequestContext } from '../http/context.ts';

/** Records a management action by the acting user in the activity log (DESIGN §10). */
export function recordActivity(ctx: RequestContext, services: Services, caller: Caller, action: string, description: string): void {
  services.logs.activity({
    action,
    description,
    ip: ctx.req.socket.remoteAddress ?? '',
    userId: caller.user.id,
    causerEmail: caller.user.email,
    requestId: ctx.id,
    createdAt: new Date().toISOString(),
  });
}
