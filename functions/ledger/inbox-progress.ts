import type { LedgerDb } from './db.ts';

/**
 * How far the webhook inbox has got, read from its rows (`webhook_deliveries`): what the webhook
 * bench reports as processed (docs/adr/0188-webhooks-measured-processed.md). A delivery is
 * processed when its row is `done`, marked in the same transaction as its effect
 * (`completeDelivery`, inbox.ts).
 */

/** Deliveries still pending (due or not). */
export async function pendingDeliveryCount(db: Pick<LedgerDb, 'client'>): Promise<number> {
  // `state <> 'done'` repeats the partial index's condition so SQLite can use it
  const rs = await db.client.execute(
    "SELECT count(*) AS n FROM webhook_deliveries WHERE state <> 'done' AND state = 'pending'",
  );
  return Number(rs.rows[0]!.n);
}

/** The deliveries `ids` by state: how many, and the latest `processed_at` of each state. */
export async function deliveryStates(
  db: Pick<LedgerDb, 'client'>,
  ids: readonly string[],
): Promise<{ state: string; n: number; last: number | null }[]> {
  const rs = await db.client.execute({
    sql: `SELECT state, count(*) AS n, max(processed_at) AS last FROM webhook_deliveries
      WHERE delivery_id IN (SELECT value FROM json_each(?)) GROUP BY state`,
    args: [JSON.stringify(ids)],
  });
  return rs.rows.map((row) => ({
    state: String(row.state),
    n: Number(row.n),
    last: row.last == null ? null : Number(row.last),
  }));
}

/** When each delivery whose id starts with `idPrefix` was received and processed. */
export async function deliveryTimes(
  db: Pick<LedgerDb, 'client'>,
  idPrefix: string,
): Promise<{ receivedAt: number; processedAt: number | null; state: string }[]> {
  const rs = await db.client.execute({
    sql: 'SELECT received_at, processed_at, state FROM webhook_deliveries WHERE delivery_id LIKE ?',
    args: [`${idPrefix}%`],
  });
  return rs.rows.map((row) => ({
    receivedAt: Number(row.received_at),
    processedAt: row.processed_at == null ? null : Number(row.processed_at),
    state: String(row.state),
  }));
}
