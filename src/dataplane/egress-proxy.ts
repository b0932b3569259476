/**
 * The egress proxy listener (DESIGN §15): the application's `HTTPS_PROXY`/`HTTP_PROXY`.
 * Its vendor SDKs call their usual URLs; for the hosts the configuration lists, the proxy
 * terminates TLS with a leaf certificate of its own CA, applies the host's rules (decrypt
 * the tokens the vendor must see, encrypt again what it echoes back) and sends the request
 * on over verified TLS. Other hosts are refused (403, nothing dialled) or, with
 * `unknown_hosts: tunnel`, tunnelled blind to public addresses only (§8).
 *
 * Pipeline of a request to a listed host: find the host rule → find the route → log it →
 * resolve its configuration → transform the body → forward to the vendor → transform or
 * relay the answer. The decrypted requests of a `CONNECT` are fed to the same HTTP server
 * as absolute-form `http://` requests, so both go through `onRequest`.
 */
import { connect as netConnect, isIP, type Socket } from 'node:net';
import type { IncomingMessage } from 'node:http';
import { createSecureContext, getCACertificates, TLSSocket, type SecureContext } from 'node:tls';
import type { EgressProxyConfig } from '../config/schema.ts';
import { AddressNotAllowedError, BadRequestError, EgressHostNotAllowedError, EgressPathRefusedError, EgressPlainHttpError, UpstreamTimeoutError, UpstreamUnreachableError, type SvcError } from '../errors.ts';
import type { RequestContext } from '../http/context.ts';
import { answerAndClose, Listener, type ListenerOptions } from '../http/listener.ts';
import { readCaFile } from '../config/jwt-key-files.ts';
import type { Services } from '../services.ts';
import { isPublicAddress, publicOnlyLookup, type Resolver } from './address-policy.ts';
import type { Destination } from './destination.ts';
import { agentPair, closeAgents, type AgentPair } from './forwarder.ts';
import { LeafCertificates, loadOrCreateCa, type LoadedCa } from './egress-ca.ts';
import { EgressHosts, rulesFor, type HostRule, type ProxyRules, type Scheme } from './egress-hosts.ts';
import { isAmbiguousPath } from './egress.ts';
import { routingPaths } from './route-match.ts';
import { transformRouteQuery } from './route-query.ts';
import { requestBody } from './route-request.ts';
import { joinDecrypted } from './echo-guard.ts';
import { routeForwardOptions } from './route-response.ts';
import { decryptsOutbound, logRouteRequest, routeConfiguration } from './transform-routes.ts';
import { canonicalAuthority, hostForUrl } from '../util/canonical-host.ts';

/** Where the requests of one terminated `CONNECT` go. */
interface Tunnel {
  readonly host: string;
  readonly port: number;
  readonly rule: HostRule;
}

/** How `svc_egress_proxy_requests_total` names requests to hosts no rule lists. */
const UNLISTED = 'unlisted';
const ROUTE_PREFIX = 'egress-proxy:';

export class EgressProxy {
  readonly listener: Listener;
  private readonly config: EgressProxyConfig;
  private readonly services: Services;
  private readonly hosts: EgressHosts;
  /** The vendors' pools, as the forwarder's but trusting system CAs plus `trust_file`. */
  private readonly vendors: AgentPair;
  private readonly resolve: Resolver | undefined;
  /** The TLS side of each terminated `CONNECT`, to the host it was opened for. */
  private readonly tunnels = new WeakMap<Socket, Tunnel>();
  private leaves: LeafCertificates | null = null;

  constructor(config: EgressProxyConfig, services: Services, options: ListenerOptions, resolve?: Resolver) {
    this.config = config;
    this.services = services;
    this.resolve = resolve;
    this.hosts = new EgressHosts(config.hosts);
    const forwarding = services.config.forwarding;
    // One context for every vendor connection: with `ca` alone, each new connection
    // would parse the whole CA list again.
    this.vendors = agentPair(
      { connectTimeout: forwarding.connect_timeout, headersTimeout: forwarding.headers_timeout, bodyTimeout: forwarding.body_timeout, ...(resolve === undefined ? {} : { resolve }) },
      { secureContext: vendorContext(config.trust_file) },
    );
    const finish = options.onFinish;
    this.listener = new Listener('egress-proxy', config.listen, (ctx) => this.onRequest(ctx), {
      ...options,
      onFinish: (ctx) => {
        finish?.(ctx);
        services.metrics.countEgressProxy(hostRuleOf(ctx.route), ctx.res.statusCode);
      },
    });
    this.listener.server.on('connect', (req: IncomingMessage, socket: Socket, head: Buffer) => this.onConnect(req, socket, head));
  }

  /**
   * Reads the CA, creating it on first start (DESIGN §15): before the listener binds, so
   * the process is healthy only with a CA the application can be given.
   */
  async prepare(): Promise<LoadedCa> {
    const loaded = await loadOrCreateCa(this.config.ca);
    this.leaves = new LeafCertificates(loaded.ca);
    return loaded;
  }

  async close(drainTimeout: number): Promise<void> {
    await this.listener.close(drainTimeout);
    await closeAgents(this.vendors);
  }

  // -------------------------------------------------------------------------------------
  // CONNECT

  private onConnect(req: IncomingMessage, socket: Socket, head: Buffer): void {
    this.listener.adopt(socket);
    socket.on('error', () => socket.destroy());
    const target = parseAuthority(req.url ?? '');
    if (target === null) {
      this.services.metrics.countEgressProxy(UNLISTED, 400);
      answerAndClose(socket, new BadRequestError(`CONNECT needs a target of the form host:port. ${NOT_A_HOST}`));
      return;
    }
    const rule = this.hosts.find(target.host, target.port, 'https');
    if (rule !== null) {
      this.terminate(socket, head, { ...target, rule }).catch((err: unknown) => {
        this.services.logger.error({ err, host: target.host }, 'egress proxy: the CONNECT could not be answered');
        socket.destroy();
      });
      return;
    }
    if (this.config.unknown_hosts === 'tunnel') {
      this.tunnel(socket, head, target.host, target.port);
      return;
    }
    this.services.metrics.countEgressProxy(UNLISTED, 403);
    answerAndClose(socket, new EgressHostNotAllowedError(target.host));
  }

  /** Answers the CONNECT, then serves what the client sends inside TLS as HTTP/1.1 requests. */
  private async terminate(socket: Socket, head: Buffer, tunnel: Tunnel): Promise<void> {
    let context;
    try {
      context = await this.leaves!.context(tunnel.host);
    } catch (err) {
      this.services.logger.error({ err, host: tunnel.host }, 'egress proxy: no certificate could be made for the host');
      if (!socket.destroyed) answerAndClose(socket, new UpstreamUnreachableError(err as Error));
      return;
    }
    // The client may have given up while the leaf was made.
    if (socket.destroyed) return;
    socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    if (head.length > 0) socket.unshift(head);
    const tls = new TLSSocket(socket, { isServer: true, secureContext: context, ALPNProtocols: ['http/1.1'] });
    tls.on('error', () => tls.destroy());
    this.tunnels.set(tls, tunnel);
    this.listener.server.emit('connection', tls);
  }

  /**
   * `unknown_hosts: tunnel`: a blind byte tunnel, to public addresses only (DESIGN §8):
   * an IP literal is checked here, a name inside the connection's own lookup, so it cannot
   * resolve to one address when checked and another when used.
   */
  private tunnel(socket: Socket, head: Buffer, host: string, port: number): void {
    const metrics = this.services.metrics;
    if (isIP(host) !== 0 && !isPublicAddress(host)) {
      metrics.countEgressProxy(UNLISTED, 403);
      answerAndClose(socket, new EgressHostNotAllowedError(host));
      return;
    }
    const upstream = netConnect({ host, port, lookup: publicOnlyLookup(this.resolve), timeout: this.services.config.forwarding.connect_timeout });
    let connected = false;
    upstream.once('timeout', () => {
      if (!connected) upstream.destroy(new UpstreamTimeoutError(new Error(`connecting to ${host}:${port} timed out`)));
    });
    upstream.once('connect', () => {
      connected = true;
      upstream.setTimeout(0);
      metrics.countEgressProxy(UNLISTED, 200);
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length > 0) upstream.write(head);
      socket.pipe(upstream);
      upstream.pipe(socket);
      // Every byte either way is read from or written to the client's socket, so its
      // timeout is the tunnel's idle time; closing it closes the vendor's side too.
      if (this.config.tunnel_idle_timeout > 0) {
        socket.setTimeout(this.config.tunnel_idle_timeout);
        socket.once('timeout', () => socket.destroy());
      }
    });
    upstream.on('error', (err) => {
      if (connected) {
        socket.destroy();
        return;
      }
      const refused = err instanceof AddressNotAllowedError || (err as { cause?: unknown }).cause instanceof AddressNotAllowedError;
      const answer: SvcError = refused ? new EgressHostNotAllowedError(host) : err instanceof UpstreamTimeoutError ? err : new UpstreamUnreachableError(err);
      metrics.countEgressProxy(UNLISTED, answer.status);
      answerAndClose(socket, answer);
    });
    socket.once('close', () => upstream.destroy());
  }

  // -------------------------------------------------------------------------------------
  // Requests: inside a terminated CONNECT, or absolute-form http://

  private onRequest(ctx: RequestContext): Promise<void> {
    const tunnel = this.tunnels.get(ctx.req.socket);
    ctx.route = `${ROUTE_PREFIX}${UNLISTED}`;
    if (tunnel !== undefined) {
      const target = ctx.req.url ?? '';
      if (!target.startsWith('/')) throw new BadRequestError('Requests inside a CONNECT tunnel must use a path (origin-form) as their target.');
      return this.forwardListed(ctx, 'https', tunnel.host, tunnel.port, tunnel.rule, target);
    }
    const url = URL.parse(ctx.req.url ?? '');
    if (url === null || url.protocol !== 'http:' || url.hostname === '' || !(ctx.req.url ?? '').toLowerCase().startsWith('http://')) {
      throw new BadRequestError('The egress proxy takes absolute-form http:// requests, and CONNECT for https.');
    }
    if (url.username !== '' || url.password !== '') throw new BadRequestError('The egress proxy does not take credentials in the request URL.');
    // The authority as the client wrote it, read by the same rules as a CONNECT target:
    // the URL parser would decode `%41` in a host, which no client sends.
    const authority = /^http:\/\/([^/?#\\]*)/i.exec(ctx.req.url ?? '')?.[1] ?? '';
    const parsed = canonicalAuthority(authority, 80);
    if (parsed === null) throw new BadRequestError(NOT_A_HOST);
    const { host, port } = parsed;
    const target = `${url.pathname}${url.search}`;
    const rule = this.hosts.find(host, port, 'http');
    if (rule !== null) return this.forwardListed(ctx, 'http', host, port, rule, target);
    if (this.config.unknown_hosts === 'deny') throw new EgressHostNotAllowedError(host);
    return this.forwardUnlisted(ctx, host, port, target);
  }

  /** A request to a listed host: its rules applied on the way out and on the way back. */
  private async forwardListed(ctx: RequestContext, scheme: Scheme, host: string, port: number, rule: HostRule, target: string): Promise<void> {
    ctx.route = `${ROUTE_PREFIX}${rule.match}`;
    const paths = routingPaths(target);
    if (paths === null) {
      ctx.closeConnection = true;
      throw new BadRequestError(UNREADABLE_TARGET);
    }
    const method = ctx.req.method ?? 'GET';
    const { rules, path } = rulesFor(rule, method, paths);
    logRouteRequest(ctx, rules, path === '' ? '/' : path);
    // Plaintext leaves over verified TLS only: a vendor reached by http:// (a bare match
    // covers port 80 too) gets what the application sent, or nothing.
    if (scheme === 'http' && decryptsOutbound(rules)) throw new EgressPlainHttpError();
    // The route was chosen by the path as the proxy reads it; a vendor that reads it
    // otherwise (dot segments left alone, `%2e%2e` or `%2F` decoded) would get the plaintext
    // at another endpoint than the one the rule names.
    if (decrypts(rules) && isAmbiguousPath(target.split('?', 1)[0]!)) throw new EgressPathRefusedError();
    const configuration = routeConfiguration(ctx, this.services, rules);
    // The query first: a bad token in it stops the request before the body is read.
    const q = target.indexOf('?');
    const rawQuery = q === -1 ? '' : target.slice(q + 1);
    const query = rules.query === null || rawQuery === '' ? null : transformRouteQuery(ctx, this.services, configuration, rules.query, rawQuery, { paths: rules.echoes });
    const sent = query === null ? target : `${target.slice(0, q)}${query.query === '' ? '' : `?${query.query}`}`;
    const destination = listedDestination(scheme, host, port, sent, rule.match, rule.wildcard);
    ctx.destination = destination.origin;
    if (query !== null) ctx.fieldsTransformed = query.count;
    const request = await requestBody(ctx, this.services, rules, configuration, { reportCount: true, recordPaths: rules.echoes });
    const decryptedAt = joinDecrypted(query?.decryptedAt ?? null, request.decryptedAt, rules.echoes);
    const options = routeForwardOptions(this.services, rules, configuration, false, decryptedAt);
    await this.services.forwarder.forward(ctx, destination, request.body, { ...options, agents: this.vendors });
    request.recordUsage();
  }

  /** `unknown_hosts: tunnel` for plain http: passed on unchanged, to public addresses only. */
  private async forwardUnlisted(ctx: RequestContext, host: string, port: number, target: string): Promise<void> {
    if (isIP(host) !== 0 && !isPublicAddress(host)) throw new EgressHostNotAllowedError(host);
    const url = new URL(`http://${hostForUrl(host)}:${port}${target}`);
    const destination: Destination = { url, origin: url.origin, path: target, authorization: null, trusted: false, entry: UNLISTED };
    ctx.destination = destination.origin;
    const request = await requestBody(ctx, this.services, null, null);
    try {
      await this.services.forwarder.forward(ctx, destination, request.body, { keepAuthorization: true });
    } catch (err) {
      if ((err as SvcError).code === 'SVC_ERR_DESTINATION_NOT_ALLOWED') throw new EgressHostNotAllowedError(host);
      throw err;
    }
  }
}

const NOT_A_HOST = 'The host must be a DNS name (letters, digits, hyphens and dots) or an IP address, with no "%", and the port 1-65535.';
const UNREADABLE_TARGET = 'The request path cannot be read the same way by every server: it holds an escaped ";", a control byte, a space or a stray "%".';

/** Whether a rule decrypts anything: the request's body or query, or the vendor's answer. */
function decrypts(rules: ProxyRules): boolean {
  return decryptsOutbound(rules) || rules.response?.mode === 'decrypt';
}

function hostRuleOf(route: string): string {
  return route.startsWith(ROUTE_PREFIX) ? route.slice(ROUTE_PREFIX.length) : UNLISTED;
}

/**
 * The vendor as a destination: a host named exactly by its rule may be at any address, one
 * a wildcard rule matched only at public ones (DESIGN §8), as allowlist entries are.
 */
function listedDestination(scheme: Scheme, host: string, port: number, target: string, match: string, wildcard: boolean): Destination {
  const authority = `${hostForUrl(host)}:${port}`;
  const origin = `${scheme}://${authority}`;
  return { url: new URL(`${origin}${target}`), origin, path: target, authorization: null, trusted: !wildcard, entry: match };
}

/**
 * A CONNECT target (RFC 9110 §9.3.6, authority-form): `host:port` or `[v6]:port`, the
 * host in its canonical form (canonicalHost); null for anything else.
 */
export function parseAuthority(target: string): { host: string; port: number } | null {
  return canonicalAuthority(target, null);
}

/**
 * The CAs a vendor's certificate may chain to: the ones Node trusts by default (its
 * bundle and NODE_EXTRA_CA_CERTS), the operating system's, and `trust_file`.
 */
function vendorContext(trustFile: string | undefined): SecureContext {
  return createSecureContext({ ca: vendorCas(trustFile), minVersion: 'TLSv1.2' });
}

function vendorCas(trustFile: string | undefined): string[] {
  const cas = [...getCACertificates('default')];
  try {
    cas.push(...getCACertificates('system'));
  } catch {
    // No system store readable: Node's bundle still applies.
  }
  if (trustFile !== undefined) {
    const read = readCaFile(trustFile);
    if (!read.ok) throw new Error(`egress_proxy.trust_file: ${read.problem}`);
    cas.push(read.value);
  }
  return cas;
}
