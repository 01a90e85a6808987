import fc from 'fast-check';
import { describe, it } from 'vitest';
import { releaseClosedLedgers } from '../../scripts/sim/ledger.ts';
import { bringUp, commandArbs, configArb, report, runUntilEveryRuleReached } from '../model/commands.ts';
import { openLedgerSut } from '../model/ledger-driver.ts';
import { newWorld } from '../model/world.ts';

/**
 * Model-based test of the real ledger (libSQL file, migrations, named commands, admission pass)
 * against the reference model in `test/model/`: random fleets and command sequences (requests of
 * every kind, cancel, pushes, heartbeats, hosts going offline and back, lease expiry, queue
 * timeouts, agent progress and release reports, stale fencing tokens, Deckard restores, operator
 * adopt / unadopt / quarantine clear). After every command the ledger's hosts, reservations and
 * leases must equal the model's, every admission pass must plan what the model predicts and obey
 * rules 1–8, and a refused command must change no row of any table.
 * `npm test` runs 300 sequences, as many as its pure twin (test/model/admission-model.test.ts) with
 * the same generators, and both assert that the sequences reached every rule
 * (`runUntilEveryRuleReached` runs another batch when a rare rule was missed); `npm run test:long`
 * runs 10,000. It is all CPU on one worker: at 1,000 it was the longest file of `npm test`
 * (docs/performance.md, "Test wall time").
 * A failure prints seed and path.
 */

const LONG = process.env.SPARK_TEST_LONG === '1';
const RUNS = Number(process.env.SPARK_MODEL_RUNS ?? (LONG ? 10_000 : 300));

let opened = 0;

describe('ledger + admission against the reference model', () => {
  it(
    `holds rules 1–8 and matches the model over ${RUNS} random fleets and sequences`,
    async () => {
      const batch = () =>
        fc.assert(
          fc.asyncProperty(
            configArb,
            fc.commands(commandArbs(), { maxCommands: 20, size: 'max' }),
            async (cfg, cmds) => {
              const sut = await openLedgerSut(cfg);
              try {
                const w = newWorld(cfg);
                await bringUp(w, sut);
                await fc.asyncModelRun(() => ({ model: w, real: sut }), cmds);
              } finally {
                await sut.close();
                if (++opened % 200 === 0) await releaseClosedLedgers();
              }
            },
          ),
          { numRuns: RUNS, reporter: report },
        );
      // a short debugging run (SPARK_MODEL_RUNS) may not reach everything, so it is not asserted
      if (RUNS >= 100) await runUntilEveryRuleReached(batch);
      else await batch();
    },
    LONG ? 4 * 3_600_000 : 1_800_000,
  );
});
