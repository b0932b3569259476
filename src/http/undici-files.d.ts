/**
 * Types for the undici files src/http/undici.ts imports one by one: undici publishes types
 * for its index only. Each file's `module.exports` is what the index re-exports under the
 * name given here.
 */
declare module 'undici/lib/dispatcher/agent.js' {
  import type { Agent } from 'undici';
  const AgentClass: typeof Agent;
  export = AgentClass;
}

declare module 'undici/lib/core/errors.js' {
  import type { errors } from 'undici';
  const undiciErrors: typeof errors;
  export = undiciErrors;
}

declare module 'undici/lib/dispatcher/dispatcher.js' {
  import type { Dispatcher } from 'undici';
  const DispatcherClass: typeof Dispatcher;
  export = DispatcherClass;
}

declare module 'undici/lib/api/index.js' {
  /** request, stream, pipeline, connect, upgrade: the methods undici's index puts on Dispatcher.prototype. */
  const api: Readonly<Record<string, unknown>>;
  export = api;
}
