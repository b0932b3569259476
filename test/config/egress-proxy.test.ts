import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { TEST_CA_FILE } from '../support/test-pki.ts';
import { ConfigError, loadConfig } from '../../src/config/load.ts';

const VENDOR_CA = TEST_CA_FILE;
const SEED = `
store: { path: ":memory:" }
seed:
  configurations: [{ name: payments }]
  classifications: [{ name: PCI, bg_color: "#000000", fg_color: "#ffffff" }]
`;

function problemsOf(text: string): readonly string[] {
  try {
    loadConfig({ text: `${SEED}${text}`, env: {} });
  } catch (error) {
    assert.ok(error instanceof ConfigError, `expected a ConfigError, got ${String(error)}`);
    return error.problems;
  }
  assert.fail('expected the config to be rejected');
}

function hostsYaml(hosts: string): string {
  return `egress_proxy:\n  listen: 127.0.0.1:0\n  hosts:\n${hosts}`;
}

describe('egress_proxy in the configuration', () => {
  it('loads as DESIGN §15 writes it, with its defaults', () => {
    const config = loadConfig({
      text: `${SEED}
egress_proxy:
  listen: 127.0.0.1:8090
  trust_file: ${VENDOR_CA}
  hosts:
    - match: API.Stripe.com
      configuration: payments
      routes:
        - match: { method: post, path: /v1/payment_methods }
          request: { decrypt: ["card[number]", "card[cvc]"] }
      response: { encrypt: [] }
    - { match: "*.twilio.com:8443", configuration: payments, request: { decrypt: [To], classification: pci }, query: { decrypt: [PhoneNumber] }, response: passthrough }
    - { match: "[::1]:9443", configuration: payments }
`,
      env: {},
    });
    const proxy = config.egress_proxy!;
    assert.equal(proxy.unknown_hosts, 'deny');
    assert.equal(proxy.tunnel_idle_timeout, 5 * 60_000, 'idle blind tunnels are closed after 5 minutes by default');
    assert.deepEqual(proxy.ca, { cert_file: './data/egress-ca.pem', key_file: './data/egress-ca.key' });
    assert.equal(proxy.hosts[0]!.match, 'api.stripe.com', 'compared in lower case');
    assert.equal(proxy.hosts[0]!.routes[0]!.match.method, 'POST');
    assert.equal(proxy.hosts[1]!.response, 'passthrough');
    assert.deepEqual(proxy.hosts[1]!.query, { decrypt: ['PhoneNumber'] });
    assert.deepEqual(proxy.hosts[2]!.routes, []);
    assert.equal(loadConfig({ text: SEED, env: {} }).egress_proxy, undefined, 'absent: no egress proxy');
  });

  it('refuses unknown keys, a query rule that is not a transform, and a missing listen', () => {
    const both = problemsOf(hostsYaml('    - { match: api.stripe.com, configuration: payments, query: { decrypt: [card], encrypt: [x] } }\n'));
    assert.ok(both.some((p) => /^egress_proxy\.hosts\.0\.query: give encrypt or decrypt, not both$/.test(p)), both.join('\n'));
    const problems = problemsOf(hostsYaml('    - { match: api.stripe.com, configuration: payments, qeury: { decrypt: [card] } }\n  tunnel: yes\n'));
    assert.ok(problems.some((p) => /^egress_proxy\.hosts\.0\.qeury: unknown key "qeury" \(did you mean "query"\?\)$/.test(p)), problems.join('\n'));
    assert.ok(problems.some((p) => /^egress_proxy\.tunnel: unknown key$/.test(p)), problems.join('\n'));
    assert.ok(problemsOf('egress_proxy: { hosts: [] }').some((p) => /^egress_proxy\.listen: /.test(p)));
  });

  it('refuses host matches that are not a host, a wildcard or a port', () => {
    const nearMisses = [
      // A wildcard covers names: `*.0.0.1` would read as the address 0.0.0.1.
      '*.0.0.1', '*.[::1]', '*.127.0.0.1',
      // What no host is: escapes, a zone id, empty labels, `_`, a numeric last label that is no IPv4 address.
      '%41pi.stripe.com', 'api.stripe.com%2e', '[fe80::1%25eth0]', 'api.stripe.com..', '.api.stripe.com', 'api_x.stripe.com', '1.2.3.4.5', '999.1.1.1', 'api.1', '-api.stripe.com', 'api-.stripe.com',
      '[127.0.0.1]', '::1', '[::1]:', 'api.stripe.com:443:443',
    ];
    for (const match of ['https://api.stripe.com', 'api.stripe.com/v1', 'api.stripe.com:0', 'api.stripe.com:65536', '*.', 'a*.stripe.com', '*', 'api..stripe.com', 'api stripe.com', '[::1', '', ...nearMisses]) {
      const problems = problemsOf(hostsYaml(`    - { match: "${match}", configuration: payments }\n`));
      assert.ok(problems.some((p) => /^egress_proxy\.hosts\.0\.match: expected a host/.test(p)), `${match}: ${problems.join('\n')}`);
    }
  });

  it('keeps each match with its host in the canonical form requests are compared in', () => {
    const written = ['API.Stripe.com.', 'Bücher.example', '[0:0::1]:9443', '[::FFFF:127.0.0.1]:8443', '127.1', '0x7f.0.0.2:81', '2130706435', '*.Twilio.COM.:8443', 'ＡＰＩ.example.org'];
    const config = loadConfig({ text: `${SEED}${hostsYaml(written.map((match) => `    - { match: "${match}", configuration: payments }\n`).join(''))}`, env: {} });
    assert.deepEqual(
      config.egress_proxy!.hosts.map((host) => host.match),
      ['api.stripe.com', 'xn--bcher-kva.example', '[::1]:9443', '127.0.0.1:8443', '127.0.0.1', '127.0.0.2:81', '127.0.0.3', '*.twilio.com:8443', 'api.example.org'],
    );
    // Two spellings of one host are the same host twice.
    for (const [a, b] of [['api.stripe.com', 'API.Stripe.com.'], ['127.0.0.1', '2130706433'], ['[::1]:9443', '[0:0:0::1]:9443'], ['10.0.0.7', '[::ffff:10.0.0.7]']]) {
      const problems = problemsOf(hostsYaml(`    - { match: "${a}", configuration: payments }\n    - { match: "${b}", configuration: payments }\n`));
      assert.ok(problems.some((p) => /^egress_proxy\.hosts\.1\.match: duplicate match/.test(p)), `${a} / ${b}: ${problems.join('\n')}`);
    }
  });

  it('refuses the same host twice (in any case), a configuration or classification that does not exist, encrypt with decrypt', () => {
    let problems = problemsOf(
      hostsYaml(
        '    - { match: api.stripe.com, configuration: payments }\n' +
          '    - { match: API.STRIPE.COM, configuration: paymnets }\n' +
          '    - match: x.example.com\n      configuration: payments\n      routes:\n        - { match: { path: /a }, request: { decrypt: [a], classification: nope } }\n',
      ),
    );
    const expect = (pattern: RegExp) => assert.ok(problems.some((p) => pattern.test(p)), `${pattern}: ${problems.join('\n')}`);
    expect(/^egress_proxy\.hosts\.1\.match: duplicate match "api\.stripe\.com" \(also at egress_proxy\.hosts\.0\)$/);
    expect(/^egress_proxy\.hosts\.1\.configuration: no configuration is named "paymnets" \(did you mean "payments"\?\)/);
    expect(/^egress_proxy\.hosts\.2\.routes\.0\.request\.classification: no classification has the id or slug "nope"/);
    problems = problemsOf(hostsYaml('    - match: x.example.com\n      configuration: payments\n      routes:\n        - { match: { path: /b }, request: { decrypt: [a], encrypt: [b] } }\n'));
    expect(/^egress_proxy\.hosts\.0\.routes\.0\.request: give encrypt or decrypt, not both$/);
  });

  it('reads tunnel_idle_timeout as a duration (0 never closes an idle tunnel) and refuses one that is not', () => {
    const idle = (value: string) => loadConfig({ text: `${SEED}egress_proxy: { listen: 127.0.0.1:0, unknown_hosts: tunnel, tunnel_idle_timeout: ${value} }\n`, env: {} }).egress_proxy!.tunnel_idle_timeout;
    assert.equal(idle('30s'), 30_000);
    assert.equal(idle('0'), 0);
    const problems = problemsOf('egress_proxy: { listen: 127.0.0.1:0, tunnel_idle_timeout: soon }\n');
    assert.ok(problems.some((p) => p.startsWith('egress_proxy.tunnel_idle_timeout: ')), problems.join('\n'));
  });

  it('refuses a trust_file that is missing or holds no certificate', () => {
    const missing = problemsOf('egress_proxy: { listen: 127.0.0.1:0, trust_file: /nonexistent/vendor-ca.pem }');
    assert.ok(missing.some((p) => /^egress_proxy\.trust_file: /.test(p)), missing.join('\n'));
    const notPem = problemsOf(`egress_proxy: { listen: 127.0.0.1:0, trust_file: ${fileURLToPath(import.meta.url)} }`);
    assert.ok(notPem.some((p) => /^egress_proxy\.trust_file: .*holds no PEM certificate/.test(p)), notPem.join('\n'));
  });
});
