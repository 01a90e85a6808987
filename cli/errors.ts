/** Exit codes of sparkctl (documented in docs/sparkctl.md). */
export const EXIT = {
  ok: 0,
  failed: 1,
  usage: 2,
  unreachable: 3,
  unauthorized: 4,
  forbidden: 5,
  notFound: 6,
  conflict: 7,
  timeout: 8,
  interrupted: 130,
} as const;

/**
 * A failure the user can fix: printed as one line (`sparkctl: …`) and turned into the exit code.
 * Anything else escaping a command is a bug and is printed with its stack.
 */
export class CliError extends Error {
  override name = 'CliError';
  constructor(
    readonly exitCode: number,
    message: string,
    /** The controller's error code, when the failure came from the API. */
    readonly code?: string,
    /** The controller's whole error answer (e.g. the readiness report of a refused `enable`). */
    readonly body?: unknown,
  ) {
    super(message);
  }
}

export const usageError = (message: string) => new CliError(EXIT.usage, message, 'usage');
