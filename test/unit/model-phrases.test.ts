import { describe, expect, it } from 'vitest';
import {
  executorPhrase,
  isJobOutcome,
  isNotRunOutcome,
  NOT_RUN_CAUSES,
  NOT_RUN_OUTCOMES,
  notRunPhrase,
} from '../../core/model.ts';
import { facts } from './admission-fixtures.ts';

/**
 * The fixed public phrases of core/model.ts: a not-run outcome in the spec's words (ADR 0177), and
 * why the controller does or does not know a host's backend (ADR 0176). Check runs, receipts,
 * refusals and waits show them as written.
 */
describe('not-run outcomes', () => {
  it('are the four infrastructure failures, each with its cause', () => {
    expect(NOT_RUN_OUTCOMES).toEqual([
      'task_not_started',
      'runner_not_picked_up',
      'preflight_failed',
      'lease_lost',
    ]);
    expect(NOT_RUN_CAUSES).toEqual({
      task_not_started: 'the task never started',
      runner_not_picked_up: 'the runner never picked the job up',
      preflight_failed: 'the host preflight refused',
      lease_lost: 'the lease was lost',
    });
    for (const o of NOT_RUN_OUTCOMES) expect(isNotRunOutcome(o), o).toBe(true);
  });

  it('nothing else is one: a test result, no outcome, an unknown word', () => {
    for (const o of ['passed', 'failed', 'cancelled', 'released', 'lease_lost ', '', 'constructor'])
      expect(isNotRunOutcome(o), o).toBe(false);
    expect(isNotRunOutcome(null)).toBe(false);
    expect(isNotRunOutcome(undefined)).toBe(false);
  });

  it('read as "not run — <cause>", anything else as null', () => {
    expect(notRunPhrase('task_not_started')).toBe('not run — the task never started');
    expect(notRunPhrase('runner_not_picked_up')).toBe('not run — the runner never picked the job up');
    expect(notRunPhrase('preflight_failed')).toBe('not run — the host preflight refused');
    expect(notRunPhrase('lease_lost')).toBe('not run — the lease was lost');
    for (const o of ['failed', 'passed', null, undefined, 3, {}, ['lease_lost']])
      expect(notRunPhrase(o), String(o)).toBeNull();
  });

  it('job outcomes are the three GitHub sets', () => {
    for (const o of ['passed', 'failed', 'cancelled']) expect(isJobOutcome(o), o).toBe(true);
    for (const o of ['lease_lost', 'released', '', null, undefined])
      expect(isJobOutcome(o), String(o)).toBe(false);
  });
});

describe('executorPhrase', () => {
  it("names the host's backend, or why it is not known", () => {
    expect(executorPhrase({ id: 'spark-3', facts: facts({ executor: 'jit-runner' }) })).toBe(
      'spark-3 runs jit-runner',
    );
    expect(executorPhrase({ id: 'spark-3', facts: facts({ executor: 'dstack' }) })).toBe(
      'spark-3 runs dstack',
    );
    expect(executorPhrase({ id: 'spark-3', facts: null })).toBe('spark-3 has not heartbeated yet');
    expect(executorPhrase({ id: 'spark-3', facts: facts({ executor: undefined }) })).toBe(
      "spark-3's agent does not say which executor it runs (it predates ADR 0176)",
    );
  });
});
