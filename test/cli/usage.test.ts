/**
 * The command line as an operator meets it: each command's own --help, and one line (exit
 * 2) for a command line that is wrong, never Node's parseArgs text or a stack trace.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runCli as cli, type CliRun } from '../support/cli.ts';


// No config file is read by any case here: a config at the default path must not matter.
const runCli = (args: readonly string[]): Promise<CliRun> => cli(args, { cwd: '/' });

/** A few at a time: the machine running the tests may have two cores. */
async function runAll(argsList: ReadonlyArray<readonly string[]>): Promise<CliRun[]> {
  const runs: CliRun[] = [];
  for (let i = 0; i < argsList.length; i += 4) runs.push(...(await Promise.all(argsList.slice(i, i + 4).map((args) => runCli(args)))));
  return runs;
}

const HELPS: Array<[command: string[], flags: string[]]> = [
  [['serve'], ['-c, --config <path>', '-h, --help']],
  [['init'], ['-c, --config <path>', '--name <name>', '--email <email>', '-h, --help']],
  [['egress-ca'], ['-c, --config <path>', '--rotate', '-h, --help']],
  [['keys', 'rotate'], ['-c, --config <path>', '--configuration <name|slug>', '-h, --help']],
  [['keys', 'rewrap'], ['-c, --config <path>', '--configuration <name|slug>', '--fields <a,b>', '--ndjson', '-h, --help']],
  [['keys', 'destroy'], ['-c, --config <path>', '--configuration <name|slug>', '--version <N>', '--confirm <name>/v<N>', '--force', '-h, --help']],
  [['store', 'copy'], ['--from <file>', '--to <postgres-url>', '-h, --help']],
];

test('every command has its own --help (and -h) that describes its options, on stdout, exit 0', async () => {
  const runs = await runAll(HELPS.flatMap(([command]) => [[...command, '--help'], [...command, '-h']]));
  HELPS.forEach(([command, flags], i) => {
    for (const run of [runs[2 * i]!, runs[2 * i + 1]!]) {
      const name = command.join(' ');
      assert.equal(run.code, 0, `${name}: ${run.stderr}`);
      assert.equal(run.stderr, '', name);
      assert.ok(run.stdout.startsWith(`usage: svc-sidecar ${name}`), `${name}:\n${run.stdout}`);
      const options = run.stdout.slice(run.stdout.indexOf('\noptions:\n'));
      for (const flag of flags) assert.ok(options.includes(flag), `${name} --help lacks ${flag}:\n${run.stdout}`);
      // Only its own options: rotate's help does not offer destroy's --version.
      const listed = options.split('\n').filter((line) => /^\s+(-\w, )?--/.test(line)).length;
      assert.equal(listed, flags.length, `${name} --help lists other options:\n${options}`);
    }
  });
  // --help wins over a mistake beside it, so the help is always one flag away.
  const beside = await runCli(['init', '--nmae', 'x', '--help']);
  assert.equal(beside.code, 0);
  assert.ok(beside.stdout.startsWith('usage: svc-sidecar init'));
  // The overall help and the keys group help name every command.
  for (const args of [['--help'], ['keys', '--help']]) {
    const run = await runCli(args);
    assert.equal(run.code, 0, args.join(' '));
    for (const sub of ['rotate', 'rewrap', 'destroy']) assert.ok(run.stdout.includes(`keys ${sub} --configuration <name|slug>`), `${args.join(' ')}:\n${run.stdout}`);
  }
  for (const args of [['--help'], ['store', '--help']]) {
    const run = await runCli(args);
    assert.equal(run.code, 0, args.join(' '));
    assert.ok(run.stdout.includes('store copy --from <file> --to <postgres-url>'), `${args.join(' ')}:\n${run.stdout}`);
  }
});

test('unknown options, missing values and unknown commands get one line of ours pointing to --help, exit 2', async () => {
  const cases: Array<[args: string[], line: string]> = [
    [['init', '--nmae', 'Ada'], 'svc-sidecar init: unknown option --nmae (did you mean --name?). See "svc-sidecar init --help".'],
    [['serve', '--verbose'], 'svc-sidecar serve: unknown option --verbose. See "svc-sidecar serve --help".'],
    [['serve', '-x'], 'svc-sidecar serve: unknown option -x. See "svc-sidecar serve --help".'],
    [['--config'], 'svc-sidecar serve: --config needs a value. See "svc-sidecar serve --help".'],
    [['serve', '-c'], 'svc-sidecar serve: -c needs a value. See "svc-sidecar serve --help".'],
    [['init', '--config', '--name', 'Ada'], 'svc-sidecar init: --config needs a value (found --name; write --config=--name if that is the value). See "svc-sidecar init --help".'],
    [['--config', 'x.yaml', 'init'], 'svc-sidecar serve: unexpected argument "init" (the command comes first: svc-sidecar init --config <path>). See "svc-sidecar serve --help".'],
    [['serve', 'now'], 'svc-sidecar serve: unexpected argument "now". See "svc-sidecar serve --help".'],
    [['sevre'], 'svc-sidecar: unknown command "sevre" (did you mean "serve"?): expected one of serve, init, egress-ca, keys, store. See "svc-sidecar --help".'],
    [['keys'], 'svc-sidecar keys: expected one of rotate, rewrap, destroy. See "svc-sidecar keys --help".'],
    [['keys', 'rotat'], 'svc-sidecar keys: unknown command "keys rotat" (did you mean "rotate"?): expected one of rotate, rewrap, destroy. See "svc-sidecar keys --help".'],
    [['keys', 'rotate'], 'svc-sidecar keys rotate: --configuration <name|slug> is required. See "svc-sidecar keys rotate --help".'],
    [['keys', 'rotate', '--configuration', 'p', '--version', '1'], 'svc-sidecar keys rotate: unknown option --version. See "svc-sidecar keys rotate --help".'],
    [['keys', 'destroy', '--version', '1'], 'svc-sidecar keys destroy: --configuration <name|slug> is required. See "svc-sidecar keys destroy --help".'],
    [['store'], 'svc-sidecar store: expected one of copy. See "svc-sidecar store --help".'],
    [['store', 'cpoy'], 'svc-sidecar store: unknown command "store cpoy" (did you mean "copy"?): expected one of copy. See "svc-sidecar store --help".'],
    [['store', 'copy', '--from', 'svc.db'], 'svc-sidecar store copy: --to <postgres-url> is required. See "svc-sidecar store copy --help".'],
    [['store', 'copy', '--from', 'svc.db', '--to', 'postgres://h/db', '--config', 'x.yaml'], 'svc-sidecar store copy: unknown option --config. See "svc-sidecar store copy --help".'],
    [['store', 'copy', '--from', 'svc.db', '--to', 'postgres://h/db', 'extra'], 'svc-sidecar store copy: unexpected argument "extra". See "svc-sidecar store copy --help".'],
    [['keys', 'rewrap', '--configuration', 'p', '--ndjson=1'], 'svc-sidecar keys rewrap: --ndjson takes no value. See "svc-sidecar keys rewrap --help".'],
  ];
  const runs = await runAll(cases.map(([args]) => args));
  cases.forEach(([args, line], i) => {
    const run = runs[i]!;
    const name = args.join(' ');
    assert.equal(run.code, 2, `${name}: ${run.stderr}`);
    assert.equal(run.stdout, '', name);
    assert.equal(run.stderr, `${line}\n`, name);
    assert.doesNotMatch(run.stderr, /ERR_PARSE_ARGS|\n\s+at /, name);
  });
});
