import { z } from 'zod';

/**
 * The request models of the dstack server routes the agent calls, written from dstack's own
 * source — dstackai/dstack tag `0.21.2` (commit 0dee238d47fafc89bdde75b83ee99a0fae7c08a1, the
 * newest release in the stored snapshot; there is no 0.22.x tag yet) — and never from the agent's
 * code, so the stand-in does not share the agent's reading. Paths below are under
 * `src/dstack/_internal/`.
 *
 * Every model is a pydantic v2 `CoreModel` (`core/models/common.py`): `extra="forbid"` (an
 * unknown key is rejected) and `coerce_numbers_to_str=True` (a number given for a `str` field is
 * accepted). A body that does not validate is answered by FastAPI's default handler — dstack's
 * `server/app.py` installs none for `RequestValidationError` — with HTTP 422 and `{"detail": [{type,
 * loc, msg, input}]}`, `loc` starting at `"body"` ({@link validationErrorBody}).
 *
 * What is type-checked: every field the agent sends or could plausibly send. Fields of the real
 * models the agent never uses are accepted by name (so a spec a real server takes is taken here
 * too) and their values are not checked — said beside each group.
 */

/** A `str` field under `coerce_numbers_to_str`. */
const Str = z.union([z.string(), z.number().transform(String)]);
const OptStr = Str.nullable().optional();
/** Fields of the real model whose values the stand-in does not check (see the header). */
const unchecked = (names: readonly string[]) =>
  Object.fromEntries(names.map((n) => [n, z.unknown().optional()])) as Record<
    string,
    z.ZodOptional<z.ZodUnknown>
  >;

/** `Duration.parse` (core/models/duration.py): seconds, or `<n>[smhdw]`. */
const DURATION = /^\d+ *[smhdw]$/;
const Duration = z.union([z.number().int(), z.string().regex(DURATION, 'Cannot parse the duration')]);
/** `OptionalOffableDuration` (core/models/profiles.py): a duration, `off`, or a bool. */
const OffableDuration = z
  .union([z.literal('off'), z.boolean(), Duration])
  .nullable()
  .optional();

/** `_ENV_STRING_REGEX` (core/models/envs.py). */
const ENV_STRING = /^([a-zA-Z_][a-zA-Z0-9_]*)(=.*$|$)/s;
/** `Env` (core/models/envs.py): a mapping, or a list of `VAR=value` / `VAR` strings. */
const Env = z.union([z.record(z.string(), Str), z.array(z.string().regex(ENV_STRING))]);

/** `CPUSpec` (core/models/resources.py): `arch` is `x86` or `arm` (gpuhunt `CPUArchitecture`). */
const CpuSpec = z.union([
  z.number().int(),
  z.string(),
  z.object({ arch: z.enum(['x86', 'arm']).nullable().optional(), count: z.unknown().optional() }).strict(),
]);
/** `ResourcesSpec` (core/models/resources.py); only `cpu` is checked (the arch decides placement). */
const ResourcesSpec = z
  .object({ cpu: CpuSpec.optional(), ...unchecked(['memory', 'shm_size', 'gpu', 'disk']) })
  .strict();

/** `InstanceMountPoint` (core/models/volumes.py): absolute host path → absolute container path. */
const InstanceMountPoint = z
  .object({
    instance_path: z.string().startsWith('/', 'The absolute path on the instance (host)'),
    path: z.string().startsWith('/', 'The absolute path in the container'),
    optional: z.boolean().optional(),
  })
  .strict();
/** `VolumeMountPoint` (core/models/volumes.py): a named network volume. */
const VolumeMountPoint = z
  .object({ name: z.union([z.string(), z.array(z.string())]), path: z.string() })
  .strict();
/** `MountPointOrShorthand` (configurations.py): an object, or `src:dst` (`src` with `/` is a host path). */
const MountPoint = z.union([InstanceMountPoint, VolumeMountPoint, z.string().regex(/^[^:]+:[^:]+$/)]);

/** `ProfileParams` (core/models/profiles.py), merged into every run configuration. */
const ProfileParams = {
  /** `fleets`: names of this project's fleets (or `<project>/<fleet>`, or a reference object). */
  fleets: z
    .array(z.union([z.string(), z.object({}).passthrough()]))
    .nullable()
    .optional(),
  max_duration: OffableDuration,
  stop_duration: OffableDuration,
  /** `retry`: `ProfileRetry` or a bool; null/absent means no retry (`core/services/profiles.py`). */
  retry: z
    .union([z.boolean(), z.object({}).passthrough()])
    .nullable()
    .optional(),
  ...unchecked([
    'backends',
    'regions',
    'availability_zones',
    'instance_types',
    'reservation',
    'spot_policy',
    'max_price',
    'creation_policy',
    'idle_duration',
    'utilization_policy',
    'startup_order',
    'stop_criteria',
    'schedule',
    'instances',
    'tags',
    'backend_options',
  ]),
};

/** `BaseRunConfiguration` (core/models/configurations.py), the fields every run type has. */
const BaseRunConfiguration = {
  name: OptStr,
  /** `image`: null means dstack's default image (`services/jobs/configurators/base.py`). */
  image: OptStr,
  user: OptStr,
  privileged: z.boolean().optional(),
  entrypoint: OptStr,
  working_dir: OptStr,
  home_dir: Str.optional(),
  env: Env.optional(),
  shell: OptStr,
  resources: ResourcesSpec.optional(),
  volumes: z.array(MountPoint).optional(),
  docker: z.boolean().nullable().optional(),
  ...unchecked([
    'registry_auth',
    'python',
    'nvcc',
    'single_branch',
    'priority',
    'repos',
    'files',
    'dstack',
    'setup',
  ]),
};

/** `ConfigurationWithPortsParams.ports`. */
const ports = z.array(z.unknown()).optional();

/**
 * `TaskConfiguration` = `ProfileParams` + `BaseRunConfiguration` + `commands` + `ports` +
 * `TaskConfigurationParams` (`nodes` ge=1, `groups`). `check_image_or_commands_present`: either
 * `commands` or `image` (configurations.py).
 */
export const TaskConfiguration = z
  .object({
    type: z.literal('task'),
    ...ProfileParams,
    ...BaseRunConfiguration,
    commands: z.array(Str).optional(),
    ports,
    nodes: z.number().int().min(1).nullable().optional(),
    groups: z.array(z.unknown()).nullable().optional(),
  })
  .strict()
  .refine((c) => (c.commands?.length ?? 0) > 0 || !!c.image || c.groups != null, {
    message: 'Value error, Either `commands` or `image` must be set',
  })
  .refine((c) => c.groups == null || c.nodes == null, {
    message: 'Value error, `nodes` and `groups` are mutually exclusive',
  });

/**
 * `DevEnvironmentConfiguration` = `ProfileParams` + `BaseRunConfiguration` + `ports` +
 * `DevEnvironmentConfigurationParams` (`ide` one of vscode/cursor/windsurf/zed, `version`, `init`,
 * `inactivity_duration` parsed by `parse_off_duration`: `off` → no limit).
 */
export const DevEnvironmentConfiguration = z
  .object({
    type: z.literal('dev-environment'),
    ...ProfileParams,
    ...BaseRunConfiguration,
    ports,
    ide: z.enum(['vscode', 'cursor', 'windsurf', 'zed']).nullable().optional(),
    version: OptStr,
    init: z.array(Str).optional(),
    inactivity_duration: z
      .union([z.literal('off'), z.boolean(), Duration])
      .nullable()
      .optional(),
  })
  .strict()
  .refine((c) => !c.version || c.ide != null, { message: 'Value error, `version` requires `ide` to be set' })
  .refine((c) => c.entrypoint == null, {
    message: 'Value error, entrypoint is not supported for dev-environment',
  });

/** `RunSpec` (core/models/runs.py); `configuration` is discriminated by `type`. */
export const RunSpec = z
  .object({
    run_name: OptStr,
    repo_id: OptStr,
    repo_code_hash: OptStr,
    repo_dir: OptStr,
    working_dir: OptStr,
    configuration_path: OptStr,
    configuration: z.discriminatedUnion('type', [TaskConfiguration, DevEnvironmentConfiguration]),
    ssh_key_pub: OptStr,
    ...unchecked(['repo_data', 'file_archives', 'profile', 'merged_profile']),
  })
  .strict();
export type RunSpecInput = z.output<typeof RunSpec>;
export type TaskConfig = z.output<typeof TaskConfiguration>;
export type DevConfig = z.output<typeof DevEnvironmentConfiguration>;

/** `ApplyRunPlanRequest` (server/schemas/runs.py): `plan: ApplyRunPlanInput`, `force` required. */
export const ApplyRunPlanRequest = z
  .object({
    plan: z
      .object({ run_spec: RunSpec, current_resource: z.object({}).passthrough().nullable().optional() })
      .strict(),
    force: z.boolean(),
  })
  .strict();

/** pydantic's `UUID` (any version) and `UUID4` (version 4 only). */
const UUID = /^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$/i;
const UUID4 = /^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$/i;

/** `GetRunRequest` (server/schemas/runs.py). */
export const GetRunRequest = z
  .object({ run_name: OptStr, id: z.string().regex(UUID).nullable().optional() })
  .strict();

/** `StopRunsRequest` (server/schemas/runs.py): `abort` is required ("Do not wait for a graceful shutdown"). */
export const StopRunsRequest = z.object({ runs_names: z.array(Str), abort: z.boolean() }).strict();

/** `ListRunsRequest` (server/schemas/runs.py). */
export const ListRunsRequest = z
  .object({
    project_name: OptStr,
    repo_id: OptStr,
    username: OptStr,
    only_active: z.boolean().optional(),
    include_jobs: z.boolean().optional(),
    job_submissions_limit: z.number().int().min(0).max(10).nullable().optional(),
    prev_submitted_at: z.string().nullable().optional(),
    prev_run_id: z.string().regex(UUID).nullable().optional(),
    limit: z.number().int().min(0).max(100).optional(),
    ascending: z.boolean().optional(),
  })
  .strict();

/**
 * `PollLogsRequest` (server/schemas/logs.py): `job_submission_id` a UUID4, `limit` 0..1000
 * (default 100), `descending` default false, `next_token` a string the storage parses.
 */
export const PollLogsRequest = z
  .object({
    run_name: Str,
    job_submission_id: z.string().regex(UUID4, 'Input should be a valid UUID, version 4'),
    start_time: z.iso.datetime({ offset: true }).nullable().optional(),
    end_time: z.iso.datetime({ offset: true }).nullable().optional(),
    descending: z.boolean().default(false),
    next_token: OptStr,
    limit: z.number().int().min(0).max(1000).default(100),
    diagnose: z.boolean().default(false),
  })
  .strict();
export type PollLogs = z.output<typeof PollLogsRequest>;

/** One item of FastAPI's 422 body for a pydantic v2 validation error. */
interface ValidationItem {
  type: string;
  loc: (string | number)[];
  msg: string;
  input: unknown;
}

/**
 * FastAPI's default `request_validation_exception_handler` body: HTTP 422, `{"detail": [...]}`.
 * `type`/`msg` follow pydantic's names for the common cases (`missing`/"Field required",
 * `extra_forbidden`/"Extra inputs are not permitted", `value_error`); others carry zod's message.
 */
export function validationErrorBody(err: z.ZodError): { detail: ValidationItem[] } {
  const detail: ValidationItem[] = [];
  for (const i of err.issues) {
    const loc = ['body', ...i.path.map((p) => (typeof p === 'symbol' ? String(p) : p))];
    if (i.code === 'unrecognized_keys') {
      for (const k of i.keys)
        detail.push({
          type: 'extra_forbidden',
          loc: [...loc, k],
          msg: 'Extra inputs are not permitted',
          input: null,
        });
    } else if (i.code === 'invalid_type' && i.input === undefined) {
      detail.push({ type: 'missing', loc, msg: 'Field required', input: null });
    } else if (i.code === 'custom') {
      detail.push({ type: 'value_error', loc, msg: i.message, input: null });
    } else {
      detail.push({ type: i.code, loc, msg: i.message, input: i.input ?? null });
    }
  }
  return { detail };
}

/** FastAPI's body for a request body that is not JSON (`json_invalid`, still 422). */
export const jsonInvalidBody = (error: string) => ({
  detail: [{ type: 'json_invalid', loc: ['body', 0], msg: 'JSON decode error', input: {}, ctx: { error } }],
});

/** `ServerClientErrorCode` (core/errors.py). */
export type ServerClientErrorCode =
  | 'error'
  | 'resource_exists'
  | 'resource_not_exists'
  | 'invalid_credentials'
  | 'backend_not_available'
  | 'repo_does_not_exist'
  | 'gateway_error';

/**
 * A `ServerClientError` as `server/app.py`'s handler answers it: HTTP 400, `{"detail":
 * [{"msg", "code"}]}` (`get_server_client_error_details`, server/utils/routers.py).
 */
export const serverClientError = (msg: string, code: ServerClientErrorCode = 'error') => ({
  status: 400,
  body: { detail: [{ msg, code }] },
});

/**
 * An `HTTPException` from `server/utils/routers.py` (`error_invalid_token`, `error_not_found`,
 * `error_forbidden`): `detail` is one object, not a list.
 */
export const httpError = (status: 403 | 404, msg: 'Invalid token' | 'Not found' | 'Access denied') => ({
  status,
  body: { detail: { msg, code: null } },
});

/** FastAPI's `HTTPBearer` without a usable `Authorization: Bearer` header. */
export const notAuthenticated = { status: 403, body: { detail: 'Not authenticated' } };
