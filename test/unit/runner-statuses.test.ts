import { describe, expect, it } from 'vitest';
import { isRunnerStatus, RESERVATION_STATUSES } from '../../core/model.ts';

/** The statuses in which a reservation's one-job runner is registered or running (the pickup sweep). */
describe('runner statuses', () => {
  it('preparing and running, nothing else', () => {
    expect(RESERVATION_STATUSES.filter((s) => isRunnerStatus(s))).toEqual(['preparing', 'running']);
    expect(isRunnerStatus('released')).toBe(false);
  });
});
