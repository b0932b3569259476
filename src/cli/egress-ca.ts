/**
 * `svc-sidecar egress-ca`: the egress proxy's CA certificate on stdout, for the
 * applications to trust (created first if the files do not exist yet, as a start would);
 * `--rotate` replaces the CA with a new one. Nothing else is printed on stdout, so the
 * output can go straight into a file or a Kubernetes secret.
 */
import type { Config } from '../config/load.ts';
import { loadOrCreateCa, rotateCa } from '../dataplane/egress-ca.ts';

export async function egressCa(config: Config, rotate: boolean): Promise<number> {
  const proxy = config.egress_proxy;
  if (proxy === undefined) {
    process.stderr.write('svc-sidecar egress-ca: this configuration has no egress_proxy section, so there is no egress proxy CA.\n');
    return 1;
  }
  if (rotate) {
    const ca = await rotateCa(proxy.ca);
    process.stdout.write(ca.certPem);
    process.stderr.write(
      `Replaced the egress proxy CA in ${proxy.ca.cert_file} and ${proxy.ca.key_file}. ` +
        'Give the new certificate to the applications, then restart the service: until it restarts it signs with the old CA.\n',
    );
    return 0;
  }
  const loaded = await loadOrCreateCa(proxy.ca);
  if (loaded.created) process.stderr.write(`Created the egress proxy CA in ${proxy.ca.cert_file} and ${proxy.ca.key_file} (key mode 0600).\n`);
  if (loaded.interruptedRotation === 'finished') process.stderr.write(`An interrupted rotation of the egress proxy CA is finished: ${proxy.ca.cert_file} and ${proxy.ca.key_file} hold the new CA.\n`);
  if (loaded.interruptedRotation === 'discarded') process.stderr.write(`An interrupted rotation of the egress proxy CA had replaced nothing: the CA in ${proxy.ca.cert_file} is kept and the rotation's files are removed.\n`);
  if (loaded.insecurePermissions) process.stderr.write(`warning: ${proxy.ca.key_file} is readable by other users; chmod 600 it.\n`);
  process.stdout.write(loaded.ca.certPem);
  return 0;
}
