import { createHash } from 'node:crypto';
import {
  describeIssues,
  MAX_RECEIPT_LINE_CHARS,
  type Receipt,
  ReceiptSchema,
} from '../../../core/protocol/receipt.ts';

/** Validates a receipt before it leaves the runner (the controller checks the same schema). */
export function checkReceipt(r: Receipt): Receipt {
  const parsed = ReceiptSchema.safeParse(r);
  if (!parsed.success)
    throw new Error(`internal: the receipt does not match its schema: ${describeIssues(parsed.error)}`);
  return parsed.data;
}

/** Trims log lines for the receipt and removes the job token should a script have printed it. */
export function receiptLines(lines: readonly string[], secrets: readonly string[]): string[] {
  return lines.map((l) => {
    let out = l;
    for (const s of secrets) if (s) out = out.split(s).join('***');
    return out.length > MAX_RECEIPT_LINE_CHARS ? `${out.slice(0, MAX_RECEIPT_LINE_CHARS - 1)}…` : out;
  });
}

/** SHA-256 of the receipt exactly as posted. */
export function receiptDigest(body: string): string {
  return createHash('sha256').update(body).digest('hex');
}

const cell = (v: string) => v.replace(/\|/g, '\\|').replace(/\n/g, ' ');

/**
 * The job-summary view of a receipt. The fencing token is left out on purpose: job summaries are
 * readable by everyone who can read the run, and tokens never appear in public places (docs/architecture.md
 * "Observability"); the receipt digest ties this view to the receipt the controller stored.
 */
export function renderSummary(r: Receipt, digest: string, recorded: string): string {
  const icon = r.result === 'passed' ? '✅' : r.result === 'cancelled' ? '⏹️' : '❌';
  const rows: [string, string][] = [
    ['Commit', `\`${r.headSha}\``],
    ['Reservation', r.reservationId],
    ['Host', r.hostId],
    ['Lease', 'fencing token checked by the controller on receipt (not shown)'],
    [
      'Suite',
      r.phases
        .map((p) => `${p.suite} (exit ${p.exitCode ?? 'none'}, ${(p.durationMs / 1000).toFixed(1)} s)`)
        .join(' → ') || r.suite,
    ],
    ['Topology', r.topology],
    ...(r.executor ? ([['Backend', r.executor]] as [string, string][]) : []),
    ...(r.lane
      ? ([
          [
            'Lane',
            `${r.lane.name}: ${(r.lane.elapsedMs / 60_000).toFixed(1)} of ${r.lane.targetMinutes} min target — ${(r.lane.overTarget ?? !r.lane.withinTarget) ? "over target (a target, not a limit: the job's limit is its timeout-minutes)" : 'within target'}`,
          ],
        ] as [string, string][])
      : []),
    ['Started', r.startedAt],
    ['Ended', r.endedAt],
    [
      'Result',
      `${r.result}${r.exitCode != null ? ` (exit ${r.exitCode})` : ''}${r.reason ? ` — ${r.reason}` : ''}`,
    ],
    ['Log', `sha256 \`${r.log.sha256}\` (${r.log.lines} lines, ${r.log.bytes} bytes)`],
    ['Receipt', `sha256 \`${digest}\` — ${recorded}`],
    // ADR 0160: the PR's code runs as this job's user and could post a receipt too
    [
      'Verdict',
      "this receipt is what the job reported (detail); the check's verdict comes from the Spark agent's own evidence on the host",
    ],
  ];
  const toolchain = Object.entries(r.toolchain)
    .map(([k, v]) => `| ${cell(k)} | ${cell(v)} |`)
    .join('\n');
  let md = `### ${icon} Spark test ${r.result}\n\n| | |\n|---|---|\n${rows.map(([k, v]) => `| ${k} | ${cell(v)} |`).join('\n')}\n`;
  md += `\n<details><summary>Toolchain and source revisions</summary>\n\n| tool | version |\n|---|---|\n${toolchain}\n\n</details>\n`;
  if (r.lastLines?.length) {
    md += `\n<details open><summary>Last ${r.lastLines.length} log lines</summary>\n\n\`\`\`text\n${r.lastLines.join('\n').replace(/```/g, "'''")}\n\`\`\`\n\n</details>\n`;
  }
  return md;
}

/** Posts the receipt; returns a one-line description of what the controller said. */
export async function postReceipt(
  controllerUrl: string,
  reservationId: string,
  jobToken: string,
  body: string,
): Promise<{ ok: boolean; detail: string }> {
  const url = `${controllerUrl.replace(/\/+$/, '')}/api/v1/leases/${encodeURIComponent(reservationId)}/receipt`;
  let res: Response;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${jobToken}` },
      body,
      signal: AbortSignal.timeout(15_000),
    });
  } catch (e) {
    const err = e as Error & { cause?: { code?: string } };
    return { ok: false, detail: `controller unreachable: ${err.cause?.code ?? err.message}` };
  }
  const text = await res.text();
  let json: { error?: { code?: string; message?: string }; duplicate?: boolean } | null = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  if (res.ok)
    return {
      ok: true,
      detail: json?.duplicate ? 'already recorded by the controller' : 'recorded by the controller',
    };
  const why = json?.error ? `${json.error.code}: ${json.error.message}` : text.slice(0, 200);
  // the job token is readable by the PR's code (same user): a receipt already recorded that is
  // not this one was posted by something else in this job (ADR 0160)
  const hint =
    json?.error?.code === 'receipt_already_recorded'
      ? '; something else in this job posted a receipt first (the job token is readable by the PR code)'
      : '';
  return { ok: false, detail: `controller refused the receipt (${res.status} ${why})${hint}` };
}
