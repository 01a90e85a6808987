import { describe, expect, it } from 'vitest';
import { cloneUrlForRepo, mergeCiForRepo, parseConfig, revokeUrlFor } from '../../core/config.ts';

/**
 * What a validated configuration says for one repository or the GitHub part (`core/config-lookups.ts`):
 * the name matching and URL joins a push handler and a CI task depend on.
 */

describe('mergeCiForRepo', () => {
  const cfg = parseConfig({
    repositories: { 'Acme/Butter': { mergeCi: false }, 'acme/jam': {} },
  });

  it('finds an entry whatever the case GitHub names the repository in', () => {
    // GitHub compares owner and repository names case-insensitively
    // (https://docs.github.com/en/repositories/creating-and-managing-repositories/about-repositories)
    expect(mergeCiForRepo(cfg, 'Acme/Butter')).toBe(false);
    expect(mergeCiForRepo(cfg, 'acme/butter')).toBe(false);
    expect(mergeCiForRepo(cfg, 'ACME/BUTTER')).toBe(false);
  });

  it('is on for an entry that does not say, and for a repository without an entry', () => {
    expect(mergeCiForRepo(cfg, 'acme/jam')).toBe(true);
    expect(mergeCiForRepo(cfg, 'Acme/Jam')).toBe(true);
    expect(mergeCiForRepo(cfg, 'acme/toast')).toBe(true);
  });
});

describe('GitHub URLs of a CI task', () => {
  it('joins the revoke path to an API base with one or more trailing slashes', () => {
    const cfg = parseConfig({ github: { apiUrl: 'https://ghe.example.com/api/v3//' } });
    expect(revokeUrlFor(cfg)).toBe('https://ghe.example.com/api/v3/installation/token');
    expect(revokeUrlFor(parseConfig({}))).toBe('https://api.github.com/installation/token');
  });

  it('joins the repository to a git base with one or more trailing slashes', () => {
    const cfg = parseConfig({ github: { gitUrl: 'https://ghe.example.com//' } });
    expect(cloneUrlForRepo(cfg, 'acme/butter')).toBe('https://ghe.example.com/acme/butter.git');
    expect(cloneUrlForRepo(parseConfig({}), 'acme/butter')).toBe('https://github.com/acme/butter.git');
  });

  it("uses a repository's own cloneUrl", () => {
    const cfg = parseConfig({
      repositories: {
        'acme/butter': { ci: 'task', executor: 'dstack', cloneUrl: 'http://mirror.lan/butter.git' },
      },
    });
    expect(cloneUrlForRepo(cfg, 'acme/butter')).toBe('http://mirror.lan/butter.git');
    expect(cloneUrlForRepo(cfg, 'acme/jam')).toBe('https://github.com/acme/jam.git');
  });
});
