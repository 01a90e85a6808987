import type { ApiClient } from './client.ts';
import { usageError } from './errors.ts';
import { parseDuration } from './format.ts';
import type { CliSettings } from './settings.ts';

/**
 * What every sparkctl command is given (client, settings, output, flags, arguments) and the
 * readers and writers of them the commands share.
 */

/** What a command may use: the API client, output streams and Ctrl-C. */
export interface CommandIo {
  out(text: string): void;
  err(text: string): void;
  /** Registers a Ctrl-C handler for the duration of a command; returns the unregister function. */
  onInterrupt(fn: () => void): () => void;
}

export interface Flags {
  json?: boolean | undefined;
  pair?: boolean | undefined;
  host?: string | undefined;
  ttl?: string | undefined;
  wait?: boolean | undefined;
  'no-wait'?: boolean | undefined;
  timeout?: string | undefined;
  all?: boolean | undefined;
  name?: string | undefined;
  scopes?: string | undefined;
  /** `token create --expires 30d`: the token stops working after this long. */
  expires?: string | undefined;
  reason?: string | undefined;
  ledger?: string | undefined;
  /** `repo enable --override hosts,deckard`: failing readiness checks to pass over (recorded). */
  override?: string | undefined;
}

export interface CommandContext {
  client: ApiClient;
  settings: CliSettings;
  io: CommandIo;
  flags: Flags;
  args: string[];
}

export const json = (io: CommandIo, value: unknown) => io.out(JSON.stringify(value, null, 2));

export function needArg(args: string[], i: number, what: string, usage: string): string {
  const v = args[i];
  if (!v) throw usageError(`missing ${what}: usage: sparkctl ${usage}`);
  return v;
}

export function durationFlag(text: string | undefined, flag: string): number | undefined {
  if (text == null) return undefined;
  const s = parseDuration(text);
  if (s == null || s <= 0)
    throw usageError(`invalid ${flag} '${text}': use e.g. 90s, 30m, 4h, 1h30m or seconds`);
  return s;
}
