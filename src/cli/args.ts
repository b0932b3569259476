/**
 * Command-line options: each command declares its own table, from which both the parser's
 * rules and the command's `--help` are made, so the help cannot drift from what is accepted.
 *
 * `parseArgs` is run non-strict to get its tokens, and every rule is checked here: its own
 * errors name Node internals (`ERR_PARSE_ARGS_UNKNOWN_OPTION`, "To specify an option
 * argument starting with a dash use ..."), while an operator needs one line saying what
 * was wrong and where the help is.
 */
import { parseArgs } from 'node:util';
import { nearestName } from '../util/nearest.ts';

export interface OptionSpec {
  readonly type: 'string' | 'boolean';
  readonly short?: string;
  /** How the value is shown in the help: `<path>`. */
  readonly value?: string;
  readonly description: string;
  /** Checked with the others, before the command opens anything. */
  readonly required?: boolean;
}

export type OptionTable = Readonly<Record<string, OptionSpec>>;

export type OptionValues = Record<string, string | boolean | undefined>;

/** A mistake on the command line: exit 2, with the command whose `--help` to read. */
export class UsageError extends Error {
  readonly command: string;

  constructor(command: string, message: string) {
    super(message);
    this.name = 'UsageError';
    this.command = command;
  }
}

export interface Parsed {
  readonly values: OptionValues;
  readonly positionals: string[];
  /** `-h` or `--help` was given: show the help whatever else is wrong. */
  readonly help: boolean;
}

/** `command` names the command in messages (`keys rotate`). */
export function parseOptions(command: string, table: OptionTable, args: readonly string[]): Parsed {
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = {};
  for (const [name, spec] of Object.entries(table)) options[name] = spec.short === undefined ? { type: spec.type } : { type: spec.type, short: spec.short };
  const { tokens } = parseArgs({ args: [...args], options, strict: false, allowPositionals: true, tokens: true });

  const values: OptionValues = {};
  const positionals: string[] = [];
  let help = false;
  let problem: string | undefined;
  for (const token of tokens) {
    if (token.kind === 'positional') {
      positionals.push(token.value);
      continue;
    }
    if (token.kind !== 'option') continue;
    if (token.name === 'help' && table['help'] !== undefined) help = true;
    problem ??= optionProblem(table, token.name, token.rawName, token.value, token.inlineValue);
    values[token.name] = table[token.name]?.type === 'boolean' ? true : token.value;
  }
  for (const [name, spec] of Object.entries(table)) {
    if (spec.required === true && values[name] === undefined) problem ??= `--${name}${spec.value === undefined ? '' : ` ${spec.value}`} is required`;
  }
  if (problem !== undefined && !help) throw new UsageError(command, problem);
  return { values, positionals, help };
}

function optionProblem(table: OptionTable, name: string, rawName: string, value: string | undefined, inline: boolean | undefined): string | undefined {
  const spec = table[name];
  if (spec === undefined) {
    const nearest = rawName.startsWith('--') ? nearestName(name, Object.keys(table)) : undefined;
    return `unknown option ${rawName}${nearest === undefined ? '' : ` (did you mean --${nearest}?)`}`;
  }
  if (spec.type === 'boolean') return inline === true ? `${rawName} takes no value` : undefined;
  if (value === undefined) return `${rawName} needs a value`;
  // `--config --name x`: the next option was taken as the value, which is never what was meant.
  if (inline !== true && value.startsWith('-') && value !== '-') return `${rawName} needs a value (found ${value}; write ${rawName}=${value} if that is the value)`;
  return undefined;
}

/** The options part of a command's help, aligned. */
export function optionsHelp(table: OptionTable): string {
  const rows = Object.entries(table).map(([name, spec]) => {
    const flag = `${spec.short === undefined ? '    ' : `-${spec.short}, `}--${name}${spec.value === undefined ? '' : ` ${spec.value}`}`;
    return [flag, spec.description] as const;
  });
  const width = Math.max(...rows.map(([flag]) => flag.length));
  return rows.map(([flag, description]) => `  ${flag.padEnd(width)}  ${description}`).join('\n');
}
