/**
 * The runner account, in a module of its own: the sandbox, the runner and the executors all
 * name it, and the runner starts processes through the sandbox, so it cannot live in either.
 */

/** The unprivileged user the runner and all it starts run as, and the helper that acts as it. */
export interface RunnerAccount {
  name: string;
  uid: number;
  gid: number;
  home: string;
  /** The argv prefix of the privileged helper (`runner.helper`, ADR 0155). */
  helper: readonly string[];
}
