import { describe, expect, it } from 'vitest';
import { docSays, GITHUB_APP_DOC, README, section, shellCommands, words } from '../helpers/operator-docs.ts';

/**
 * How the walkthrough (test/e2e/walkthrough.test.ts) reads the docs: a doc change that drops or
 * adds a step must show up in what these return, or the walkthrough could not fail on it.
 */

const DOC = [
  '# Title',
  '## Setup',
  'Start the thing:',
  '```sh',
  'npm ci && npm start     # the controller',
  '# a whole-line comment',
  'npx sparkctl repo enable \\',
  '  acme/butter',
  '```',
  '### Inside',
  '```sh',
  'npx sparkctl deckard drill',
  '```',
  '```yaml',
  '# not a heading, not a command',
  'runs-on: [self-hosted]',
  '```',
  '## Next',
  '```sh',
  'npm test',
  '```',
].join('\n');

describe('the docs as the walkthrough reads them', () => {
  it('a section runs to the next heading of its level, subsections and fenced # lines included', () => {
    const s = section(DOC, /^## Setup/);
    expect(s).toContain('### Inside');
    expect(s).toContain('runs-on');
    expect(s).not.toContain('npm test');
    expect(() => section(DOC, /^## Gone/)).toThrow(/the docs have no section/);
  });

  it('commands of sh blocks only, in order: comments dropped, continuations joined, && split', () => {
    expect(shellCommands(section(DOC, /^## Setup/))).toEqual([
      'npm ci',
      'npm start',
      'npx sparkctl repo enable acme/butter',
      'npx sparkctl deckard drill',
    ]);
    // a step removed from the docs is gone from what the walkthrough runs
    expect(shellCommands(DOC.replace('npx sparkctl deckard drill\n', ''))).not.toContain(
      'npx sparkctl deckard drill',
    );
  });

  it('a prose step needs its sentence, however the lines wrap', () => {
    expect(() =>
      docSays('set its id as\n`github.runnerGroupId`', 'set its id as `github.runnerGroupId`', 'x'),
    ).not.toThrow();
    expect(() => docSays('set it', 'set its id as `github.runnerGroupId`', 'to set the group id')).toThrow(
      /the docs no longer tell the operator to set the group id/,
    );
  });

  it('a command that needs a shell is not run word by word', () => {
    expect(words('npx sparkctl host adopt spark-1')).toEqual(['npx', 'sparkctl', 'host', 'adopt', 'spark-1']);
    expect(() => words('curl -H "Authorization: Bearer $T" x')).toThrow(/needs a shell/);
  });

  it('the shipped docs have the sections the walkthrough reads, each with its commands', () => {
    expect(shellCommands(section(README, /^### First setup/)).length).toBeGreaterThan(0);
    expect(shellCommands(section(GITHUB_APP_DOC, /^## Create the App/))).toHaveLength(1);
  });
});
