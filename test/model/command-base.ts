import { admit } from './admit.ts';
import type { Cmd, Sut } from './sut.ts';
import type * as M from './world.ts';

/** Every command: act on the world and the system, compare them, then one admission pass. */
export abstract class Base implements Cmd {
  check(_w: Readonly<M.World>): boolean {
    return true;
  }
  async run(w: M.World, sut: Sut): Promise<void> {
    await this.act(w, sut);
    await sut.check(w);
    await admit(w, sut);
  }
  abstract act(w: M.World, sut: Sut): Promise<void>;
  abstract toString(): string;
}

/** A refused command must change nothing (the system checks that itself when it can). */
export async function refused<T>(sut: Sut, fn: () => Promise<T>): Promise<T> {
  return sut.unchanged ? sut.unchanged(fn) : fn();
}
