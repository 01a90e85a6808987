import { createHash } from 'node:crypto';
import { type CheckRun, DOC } from './model.ts';
import { exampleOf, overlay } from './schema.ts';
import type { RestHandler } from './world.ts';

/**
 * The fake GitHub's repository area: repositories, collaborators, pull requests, contents,
 * commits, labels and check runs. server.ts authenticates each call and dispatches it here by
 * `method path`.
 */

/** GET /repos/{owner}/{repo} */
const getRepo: RestHandler = (_w, c) => {
  const { send, notFound, full, params, repo } = c;
  return repo
    ? send(
        200,
        full(
          {
            full_name: `${params.owner}/${params.repo}`,
            name: params.repo,
            default_branch: repo.defaultBranch,
          },
          200,
        ),
      )
    : notFound();
};

/** GET /repos/{owner}/{repo}/collaborators/{username}/permission */
const getCollaboratorPermission: RestHandler = (w, c) => {
  const { send, notFound, full, params, repo } = c;
  if (!repo || w.ghostUsers.has(params.username!.toLowerCase())) return notFound();
  // logins are case-insensitive; an existing user without access is `none` (`read` where
  // the repository is public), not a 404 (DOC.permission)
  const login = Object.keys(repo.collaborators).find(
    (c) => c.toLowerCase() === params.username!.toLowerCase(),
  );
  const role = login ? repo.collaborators[login]! : repo.visibility === 'public' ? 'read' : 'none';
  const permission = role === 'maintain' ? 'write' : role === 'triage' ? 'read' : role;
  return send(200, full({ permission, role_name: role, user: { login: login ?? params.username } }, 200));
};

/** GET /repos/{owner}/{repo}/pulls/{pull_number} */
const getPull: RestHandler = (_w, c) => {
  const { send, notFound, full, params, repo, op } = c;
  const pr = repo?.pulls[Number(params.pull_number)];
  if (!repo || !pr) return notFound();
  const base = `${params.owner}/${params.repo}`;
  return send(
    200,
    full(
      {
        number: Number(params.pull_number),
        state: pr.state,
        labels: pr.labels.map((name, i) =>
          overlay(exampleOf(op.responses['200']?.properties?.labels?.items), { id: i + 1, name }),
        ),
        head: { sha: pr.headSha, ref: 'topic', repo: pr.headRepo ? { full_name: pr.headRepo } : null },
        base: { sha: repo.headSha, ref: repo.defaultBranch, repo: { full_name: base } },
      },
      200,
    ),
  );
};

/** GET /repos/{owner}/{repo}/contents/{path} */
const getContents: RestHandler = (w, c) => {
  const { send, notFound, params, repo, url } = c;
  // a file on a ref, base64 with a newline every 60 characters, its git blob sha (DOC.contents);
  // the fake's repositories hold their workflow files, the same on every branch
  if (!repo) return notFound();
  const ref = (url.searchParams.get('ref') ?? repo.defaultBranch).replace(/^refs\/heads\//, '');
  if (ref !== repo.defaultBranch && !(ref in repo.branches) && ref !== repo.headSha)
    return send(404, {
      message: `No commit found for the ref ${ref}`,
      documentation_url: DOC.contents,
    });
  const file = /^\.github\/workflows\/([^/]+)$/.exec(params.path!)?.[1];
  const wf = file ? repo.workflows[file] : undefined;
  if (!wf) return notFound();
  const bytes = Buffer.from(wf.text, 'utf8');
  const blobSha = createHash('sha1')
    .update(Buffer.concat([Buffer.from(`blob ${bytes.length}\0`), bytes]))
    .digest('hex');
  const b64 = bytes.toString('base64').replace(/.{60}/g, '$&\n');
  const self = `${w.url}/repos/${params.owner}/${params.repo}/contents/${params.path}?ref=${ref}`;
  const html = `https://github.com/${params.owner}/${params.repo}/blob/${ref}/${params.path}`;
  const git = `${w.url}/repos/${params.owner}/${params.repo}/git/blobs/${blobSha}`;
  return send(200, {
    type: 'file',
    encoding: 'base64',
    size: bytes.length,
    name: file,
    path: params.path,
    content: b64,
    sha: blobSha,
    url: self,
    git_url: git,
    html_url: html,
    download_url: `https://raw.githubusercontent.com/${params.owner}/${params.repo}/${ref}/${params.path}`,
    _links: { git, html, self },
  });
};

/** GET /repos/{owner}/{repo}/commits/{ref} */
const getCommit: RestHandler = (_w, c) => {
  const { send, notFound, full, repo } = c;
  return repo ? send(200, full({ sha: repo.headSha }, 200)) : notFound();
};

/** POST /repos/{owner}/{repo}/check-runs */
const createCheckRun: RestHandler = (w, c) => {
  const { send, notFound, full, params, body, repo } = c;
  if (!repo) return notFound();
  const b = body as {
    name: string;
    head_sha: string;
    external_id?: string;
    status?: string;
    conclusion?: string;
    output?: { title?: string; summary?: string };
  };
  const run: CheckRun = {
    id: w.nextId++,
    repo: `${params.owner}/${params.repo}`,
    head_sha: b.head_sha,
    name: b.name,
    external_id: b.external_id ?? null,
    status: b.conclusion ? 'completed' : (b.status ?? 'queued'),
    conclusion: b.conclusion ?? null,
    output: { title: b.output?.title ?? null, summary: b.output?.summary ?? null },
    updates: 0,
  };
  w.checkRuns.push(run);
  return send(201, full(checkRunBody(run), 201));
};

/** PATCH /repos/{owner}/{repo}/check-runs/{check_run_id} */
const patchCheckRun: RestHandler = (w, c) => {
  const { send, notFound, full, params, body } = c;
  const run = w.checkRuns.find((c) => c.id === Number(params.check_run_id));
  if (!run) return notFound();
  const b = body as {
    status?: string;
    conclusion?: string;
    output?: { title?: string; summary?: string };
  };
  if (b.status) run.status = b.status;
  if (b.conclusion) {
    run.conclusion = b.conclusion;
    run.status = 'completed';
  }
  if (b.output)
    run.output = {
      title: b.output.title ?? run.output.title,
      summary: b.output.summary ?? run.output.summary,
    };
  run.updates++;
  return send(200, full(checkRunBody(run), 200));
};

/** GET /repos/{owner}/{repo}/commits/{ref}/check-runs */
const listCheckRuns: RestHandler = (w, c) => {
  const { send, full, paged, params, url, op } = c;
  const name = url.searchParams.get('check_name');
  const runs = w.checkRuns.filter(
    (c) =>
      c.repo.toLowerCase() === `${params.owner}/${params.repo}`.toLowerCase() &&
      c.head_sha === params.ref &&
      (!name || c.name === name),
  );
  const p = paged(runs);
  return send(
    200,
    full(
      {
        total_count: runs.length,
        check_runs: p.items.map((r) =>
          overlay(exampleOf(op.responses['200']?.properties?.check_runs?.items), checkRunBody(r)),
        ),
      },
      200,
    ),
    p.headers,
  );
};

/** POST /repos/{owner}/{repo}/labels */
const createLabel: RestHandler = (_w, c) => {
  const { send, notFound, full, body, repo } = c;
  if (!repo) return notFound();
  const b = body as { name: string; color?: string };
  // label names are unique regardless of case (DOC.labels)
  if ([...repo.labels].some((l) => l.toLowerCase() === b.name.toLowerCase()))
    return send(422, {
      message: 'Validation Failed',
      documentation_url: 'x',
      errors: [{ resource: 'Label', code: 'already_exists', field: 'name' }],
    });
  repo.labels.add(b.name);
  return send(201, full({ name: b.name, color: b.color ?? 'ededed' }, 201));
};

/** This area's operations, by `method path`. */
export const REPOS_REST: Record<string, RestHandler> = {
  'get /repos/{owner}/{repo}': getRepo,
  'get /repos/{owner}/{repo}/collaborators/{username}/permission': getCollaboratorPermission,
  'get /repos/{owner}/{repo}/pulls/{pull_number}': getPull,
  'get /repos/{owner}/{repo}/contents/{path}': getContents,
  'get /repos/{owner}/{repo}/commits/{ref}': getCommit,
  'post /repos/{owner}/{repo}/check-runs': createCheckRun,
  'patch /repos/{owner}/{repo}/check-runs/{check_run_id}': patchCheckRun,
  'get /repos/{owner}/{repo}/commits/{ref}/check-runs': listCheckRuns,
  'post /repos/{owner}/{repo}/labels': createLabel,
};

function checkRunBody(r: CheckRun) {
  return {
    id: r.id,
    head_sha: r.head_sha,
    name: r.name,
    external_id: r.external_id,
    status: r.status,
    conclusion: r.conclusion,
    output: {
      title: r.output.title,
      summary: r.output.summary,
      text: null,
      annotations_count: 0,
      annotations_url: 'https://github.invalid/a',
    },
  };
}
