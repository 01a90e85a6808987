/**
 * The project's error family (docs/adr/0207-one-error-family.md). An expected outcome is a value,
 * misuse is a `TypeError`; what is thrown on purpose is one of two kinds:
 *
 * - {@link StatusError}: an HTTP answer's status and machine-readable code. The controller's
 *   handlers throw it (`functions/errors.ts` `ApiError`), and the agent raises it for a refusal
 *   the controller answered (`ControllerRejected`).
 * - {@link ExitError}: a failure the user can fix. A command prints its one-line message and
 *   ends with its exit code (`EXIT`): sparkctl, the agent, the host preflight, the scripts.
 */

/** Exit codes of sparkctl and the other commands (documented in docs/sparkctl.md). */
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

/** An HTTP answer's status with a machine-readable `code` (e.g. `stale_fencing_token`). */
export class StatusError extends Error {
  override name = 'StatusError';
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** A failure the user can fix: printed as one line, the command exits with `exitCode`. */
export class ExitError extends Error {
  override name = 'ExitError';
  constructor(
    readonly exitCode: number,
    message: string,
  ) {
    super(message);
  }
}
