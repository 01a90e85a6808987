/**
 * Parses `/spark …` commands from an issue comment (docs/architecture.md "GitHub integration"). Only a line
 * that starts with `/spark` counts, so quoting a command in prose (`> /spark test`) does nothing.
 */
export type SparkCommand =
  | { kind: 'test'; pair: boolean; long: boolean }
  | { kind: 'status' }
  | { kind: 'cancel' }
  | { kind: 'invalid'; message: string };

/** At most this many characters of a comment are ever echoed back. */
export const MAX_ECHO_CHARS = 80;

/**
 * Echoes untrusted comment text as one Markdown code span of at most {@link MAX_ECHO_CHARS}
 * characters: backticks and line breaks cannot end the span or start new Markdown.
 */
export function echoSpan(text: string): string {
  const flat = text.replace(/[`\r\n\t]/g, ' ');
  const cut = flat.length > MAX_ECHO_CHARS ? `${flat.slice(0, MAX_ECHO_CHARS - 1)}…` : flat;
  return `\`${cut}\``;
}

const USAGE = 'usage: /spark test [--pair] [--long] | /spark status | /spark cancel';

/** Returns the first `/spark` command in the comment, or null when there is none. */
export function parseSparkCommand(body: string | null | undefined): SparkCommand | null {
  if (!body) return null;
  for (const raw of body.split(/\r?\n/)) {
    const line = raw.trim();
    if (!/^\/spark(\s|$)/.test(line)) continue;
    const [, sub, ...rest] = line.split(/\s+/);
    if (sub === 'test') {
      const unknown = rest.filter((f) => f !== '--pair' && f !== '--long');
      if (unknown.length)
        return { kind: 'invalid', message: `unknown option ${echoSpan(unknown.join(' '))}; ${USAGE}` };
      return { kind: 'test', pair: rest.includes('--pair'), long: rest.includes('--long') };
    }
    if (sub === 'status' && rest.length === 0) return { kind: 'status' };
    if (sub === 'cancel' && rest.length === 0) return { kind: 'cancel' };
    return { kind: 'invalid', message: `unknown command ${echoSpan(line)}; ${USAGE}` };
  }
  return null;
}
