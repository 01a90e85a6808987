/** One part's benchmark results: a JSON section for bench/results.json and rows for the printed table. */
export interface BenchSection {
  /** Top-level key in bench/results.json (e.g. "admission", "agent", "webhooks"). */
  key: string;
  json: unknown;
  rows: Array<{ metric: string; value: string; target?: string; met?: boolean }>;
}

/** Each part exports `run` from scripts/bench/<part>.ts; `progress` prints a line while it works. */
export type BenchRunner = (progress: (msg: string) => void) => Promise<BenchSection | BenchSection[]>;
