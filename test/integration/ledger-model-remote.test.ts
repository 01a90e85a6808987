import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { admissionPassStats } from '../../functions/ledger/admission-pass.ts';
import { releaseClosedLedgers } from '../../scripts/sim/ledger.ts';
import { bringUp, commandArbs, configArb, report } from '../model/commands.ts';
import { openLedgerSut } from '../model/ledger-driver.ts';
import { newWorld } from '../model/world.ts';

/**
 * The model-based ledger test (`ledger-model.test.ts`) on a remote ledger: the same random fleets
 * and command sequences, the same checks after every command (rows equal the model's, every pass
 * plans what the model predicts and obeys rules 1–8, a refused command changes nothing), with the
 * ledger served by the sqld stand-in and reached over HTTP. Admission passes there are one read
 * batch and one guarded write batch, or the interactive transaction when the plan needs more
 * (docs/adr/0185-admission-pass-in-two-round-trips.md); both must match the model.
 */

const RUNS = Number(
  process.env.SPARK_MODEL_RUNS_REMOTE ?? (process.env.SPARK_TEST_LONG === '1' ? 1_000 : 40),
);

describe('remote ledger + admission against the reference model', () => {
  it(`holds rules 1–8 and matches the model over ${RUNS} random sequences over HTTP`, async () => {
    const totals = { batched: 0, interactive: 0 };
    let opened = 0;
    await fc.assert(
      fc.asyncProperty(
        configArb,
        fc.commands(commandArbs(), { maxCommands: 20, size: 'max' }),
        async (cfg, cmds) => {
          const sut = await openLedgerSut(cfg, { remote: true });
          try {
            const w = newWorld(cfg);
            await bringUp(w, sut);
            await fc.asyncModelRun(() => ({ model: w, real: sut }), cmds);
          } finally {
            const st = admissionPassStats(sut.ledger);
            totals.batched += st.batched;
            totals.interactive += st.interactive;
            await sut.close();
            if (++opened % 200 === 0) await releaseClosedLedgers();
          }
        },
      ),
      { numRuns: RUNS, reporter: report },
    );
    // both ways of applying a pass were exercised (the check would pass vacuously otherwise)
    expect(totals.batched).toBeGreaterThan(RUNS);
    expect(totals.interactive).toBeGreaterThan(0);
  }, 1_800_000);
});
