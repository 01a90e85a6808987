import { describe, expect, it } from 'vitest';
import { leaseGrantsOf, leaseGrantsOfData } from '../../core/events.ts';

/**
 * The leases a history row granted (core/events.ts, ADR 0100): only a well-formed grant counts.
 * A row whose data is missing, not an object, or lacks a lease's id, reservation, host or token
 * grants nothing, so a damaged row never invents a lease in a replay.
 */
const lease = { id: 'l-spark-2-4', hostId: 'spark-2', fencingToken: 4, lend: false, hostFrom: 'idle' };
const granted = {
  leaseId: 'l-spark-2-4',
  reservationId: 'r-7',
  hostId: 'spark-2',
  fencingToken: 4,
  lend: false,
  hostFrom: 'idle',
};

describe('leaseGrantsOf', () => {
  it('a row without data grants nothing', () => {
    expect(leaseGrantsOf({ type: 'lease.granted', subjectId: 'l-spark-2-3', dataJson: null })).toEqual([]);
    expect(leaseGrantsOf({ type: 'reservation.allocated', subjectId: 'r-7', dataJson: null })).toEqual([]);
    expect(leaseGrantsOf({ type: 'lease.granted', subjectId: 'l-spark-2-3', dataJson: 'null' })).toEqual([]);
  });

  it('an old lease.granted row needs its reservation, host and token', () => {
    const row = (data: object) => ({
      type: 'lease.granted',
      subjectId: 'l-spark-2-3',
      dataJson: JSON.stringify(data),
    });
    expect(leaseGrantsOf(row({ hostId: 'spark-2', fencingToken: 3 }))).toEqual([]);
    expect(leaseGrantsOf(row({ reservationId: 7, hostId: 'spark-2', fencingToken: 3 }))).toEqual([]);
    expect(leaseGrantsOf(row({ reservationId: 'r-6', fencingToken: 3 }))).toEqual([]);
    expect(leaseGrantsOf(row({ reservationId: 'r-6', hostId: 'spark-2', fencingToken: 3 }))).toEqual([
      {
        leaseId: 'l-spark-2-3',
        reservationId: 'r-6',
        hostId: 'spark-2',
        fencingToken: 3,
        lend: false,
        hostFrom: null,
      },
    ]);
  });

  it('an allocated row grants only its well-formed leases', () => {
    const { id: _id, ...noId } = lease;
    const { hostId: _host, ...noHost } = lease;
    const data = { leases: ['l-spark-1-2', null, 5, noId, noHost, { ...lease, id: 12 }, lease] };
    expect(
      leaseGrantsOf({ type: 'reservation.allocated', subjectId: 'r-7', dataJson: JSON.stringify(data) }),
    ).toEqual([granted]);
  });
});

describe('leaseGrantsOfData', () => {
  it('only an allocated or an old granted row grants', () => {
    expect(leaseGrantsOfData('reservation.allocated', 'r-7', { leases: [lease] })).toEqual([granted]);
    for (const type of ['reservation.queued', 'reservation.released', 'lease.released', ''])
      expect(leaseGrantsOfData(type, 'r-7', { leases: [lease] }), type).toEqual([]);
  });

  it('data that is not an object grants nothing', () => {
    for (const data of [null, undefined, 'r-7', 3, true])
      expect(leaseGrantsOfData('lease.granted', 'l-spark-2-3', data), String(data)).toEqual([]);
    expect(leaseGrantsOfData('reservation.allocated', 'r-7', null)).toEqual([]);
  });
});
