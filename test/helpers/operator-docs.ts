import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from '../../scripts/sim/doubles/index.ts';

/**
 * The operator's documentation as the walkthrough test (test/e2e/walkthrough.test.ts) reads it: the
 * fenced shell commands of a section, in order, and the sentences of prose that tell the operator
 * to do something no command does (an edit of the config, a restart, installing the App). The test
 * runs only what these return, so a doc change that breaks the flow breaks the test.
 */

export const README = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8');
export const GITHUB_APP_DOC = readFileSync(join(REPO_ROOT, 'docs', 'github-app.md'), 'utf8');

/**
 * The text of the section whose heading matches `heading`, up to the next heading of the same or
 * a higher level (subsections included); throws when the docs no longer have it.
 */
export function section(md: string, heading: RegExp): string {
  const lines = md.split('\n');
  const start = lines.findIndex((l) => /^#{1,6} /.test(l) && heading.test(l));
  if (start < 0) throw new Error(`the docs have no section ${heading}`);
  const level = /^(#+)/.exec(lines[start]!)![1]!.length;
  let end = lines.length;
  let fenced = false;
  for (let i = start + 1; i < lines.length; i++) {
    if (lines[i]!.startsWith('```')) fenced = !fenced;
    const m = /^(#+) /.exec(lines[i]!);
    if (!fenced && m && m[1]!.length <= level) {
      end = i;
      break;
    }
  }
  return lines.slice(start, end).join('\n');
}

/**
 * The commands of the ```sh blocks of `md`, in order: comments dropped (a whole-line comment is no
 * command), continuation lines joined, `a && b` split into its commands.
 */
export function shellCommands(md: string): string[] {
  const out: string[] = [];
  for (const block of md.matchAll(/^```(?:sh|bash|shell)\n([\s\S]*?)^```$/gm)) {
    const joined = block[1]!.replace(/\s*\\\n\s*/g, ' ');
    for (const raw of joined.split('\n')) {
      // `#` starts a comment only at a word's start (not inside `a#b`)
      const line = raw.replace(/(^|\s)#.*$/, '').trim();
      if (!line) continue;
      for (const part of line.split(/\s+&&\s+/)) out.push(part.trim());
    }
  }
  return out;
}

/** Markdown prose as one line of plain words: whitespace runs are one space. */
function plain(md: string): string {
  return md.replace(/\s+/g, ' ');
}

/**
 * Where the docs say `phrase` (whitespace-insensitive; an offset into their plain text), so prose
 * steps run in the order the docs give them; throws unless they say it: the walkthrough does a
 * prose step only where the docs tell the operator to.
 */
export function docSays(md: string, phrase: string | RegExp, what: string): number {
  const text = plain(md);
  const at = typeof phrase === 'string' ? text.indexOf(plain(phrase)) : text.search(phrase);
  if (at < 0) throw new Error(`the docs no longer tell the operator ${what} (looked for ${String(phrase)})`);
  return at;
}

/** Splits a documented command into words; the walkthrough's commands need no shell quoting. */
export function words(command: string): string[] {
  if (/["'`$|;<>]/.test(command.replace(/^export \w+=\S+$/, '')))
    throw new Error(`the walkthrough cannot run a command that needs a shell: ${command}`);
  return command.split(/\s+/);
}
