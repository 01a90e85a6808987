import { EXIT, ExitError } from '../core/errors.ts';

/** Exit codes of sparkctl (documented in docs/sparkctl.md): the family's, `core/errors.ts`. */
export { EXIT };

/**
 * A failure the user can fix: printed as one line (`sparkctl: …`) and turned into the exit code.
 * Anything else escaping a command is a bug and is printed with its stack.
 */
export class CliError extends ExitError {
  override name = 'CliError';
  constructor(
    exitCode: number,
    message: string,
    /** The controller's error code, when the failure came from the API. */
    readonly code?: string,
    /** The controller's whole error answer (e.g. the readiness report of a refused `enable`). */
    readonly body?: unknown,
  ) {
    super(exitCode, message);
  }
}

export const usageError = (message: string) => new CliError(EXIT.usage, message, 'usage');
