/**
 * The `keys` subcommands' usage, help and options, apart from their implementation
 * (src/cli/keys.ts), which src/cli/run.ts loads only when one of them runs: it brings the
 * whole application with it.
 */
import type { OptionTable } from './args.ts';

/** Every subcommand works on one encryption configuration. */
const CONFIGURATION_OPTION = { type: 'string', value: '<name|slug>', required: true, description: 'the encryption configuration, by name or proxy slug' } as const;

/** Each subcommand's usage, help and options (`--config` and `--help` are added by run.ts). */
export const KEYS_COMMANDS = {
  rotate: {
    usage: 'keys rotate --configuration <name|slug>',
    summary: 'add the next key version and print it',
    about: 'Adds the next key version to an encryption configuration and prints its number. New tokens use it at once; older versions still decrypt.',
    options: {
      configuration: CONFIGURATION_OPTION,
    },
  },
  rewrap: {
    usage: 'keys rewrap --configuration <name|slug> [--fields a,b] [--ndjson] < in.json > out.json',
    summary: 're-encrypt the tokens of a JSON (or NDJSON) document under the newest version',
    about: 'Reads a JSON (or NDJSON) document on stdin and writes it to stdout with its tokens re-encrypted under the newest key version; bytes outside the tokens are unchanged. Nothing is written to stdout if a token does not open.',
    options: {
      configuration: CONFIGURATION_OPTION,
      fields: { type: 'string', value: '<a,b>', description: 'only these field paths (default: every token anywhere)' },
      ndjson: { type: 'boolean', description: 'the document is NDJSON: one JSON value per line' },
    },
  },
  destroy: {
    usage: 'keys destroy --configuration <name|slug> --version <N> --confirm <name>/v<N> [--force]',
    summary: 'erase key version N for good: its tokens can never be decrypted again',
    about: 'Erases key version N of an encryption configuration from the store. Its tokens can never be decrypted again: rewrap them first. The current version cannot be destroyed.',
    options: {
      configuration: CONFIGURATION_OPTION,
      // Required too; checked by keys() with messages that say why (`--confirm` must repeat the name).
      version: { type: 'string', value: '<N>', description: 'the key version to destroy' },
      confirm: { type: 'string', value: '<name>/v<N>', description: 'the configuration name and version again, e.g. payments/v1' },
      force: { type: 'boolean', description: 'even if the version was current less than keys.destroy_after ago' },
    },
  },
} as const satisfies Record<string, KeysCommandSpec>;

export interface KeysCommandSpec {
  readonly usage: string;
  readonly summary: string;
  readonly about: string;
  readonly options: OptionTable;
}
