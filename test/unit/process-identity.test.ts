import { describe, expect, it } from 'vitest';
import { isolateIdentity, nodeProcessIdentity } from '../../functions/process-identity.ts';

/** Which claims a controller judges gone: only its own machine's, and only for a missing pid. */
describe('process identity of the outbox claims', () => {
  const exists = (pid: number) => pid === 200;
  const me = nodeProcessIdentity('spark-ctl', 100, exists, 'aaaa');
  const other = (tag: string, host: string, pid: number) =>
    nodeProcessIdentity(host, pid, exists, tag).workerId;

  it('names the machine and the process in its claim token', () => {
    expect(me.workerId).toMatch(/^ctl-aaaa-[0-9a-f]{10}@spark-ctl:100$/);
    expect(me.canTellGone).toBe(true);
  });

  it('judges a claim of this machine gone only when its pid names no process', () => {
    expect(me.isGone(other('bbbb', 'spark-ctl', 300))).toBe(true);
    expect(me.isGone(other('bbbb', 'spark-ctl', 200))).toBe(false);
  });

  it('never judges another machine, an isolate or a malformed token', () => {
    expect(me.isGone(other('bbbb', 'other-box', 300))).toBe(false);
    expect(me.isGone(isolateIdentity().workerId)).toBe(false);
    for (const token of ['', 'ctl-@spark-ctl:300', 'ctl-bbbb-01@spark-ctl:x', 'ctl-bbbb-01@spark-ctl:0'])
      expect(me.isGone(token)).toBe(false);
  });

  it('tells an earlier process that had our pid from another controller in this process', () => {
    // a container's controller is pid 1 on every start: the earlier one's claims are gone
    expect(me.isGone(other('bbbb', 'spark-ctl', 100))).toBe(true);
    expect(me.isGone(other('aaaa', 'spark-ctl', 100))).toBe(false);
    expect(me.isGone(me.workerId)).toBe(false);
  });

  it('an isolate cannot tell, so its claims only expire', () => {
    const iso = isolateIdentity();
    expect(iso.canTellGone).toBe(false);
    expect(iso.isGone(other('bbbb', 'spark-ctl', 300))).toBe(false);
  });
});
