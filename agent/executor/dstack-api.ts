import { z } from 'zod';

/**
 * The part of dstack's server REST API the `dstack` executor uses, with request
 * and response shapes taken from dstack's own source (`dstackai/dstack`, read at tag 0.21.2,
 * commit 0dee238d47fafc89bdde75b83ee99a0fae7c08a1; paths under `src/dstack/_internal/`):
 *
 * - routes: `src/dstack/_internal/server/routers/runs.py` — every call is a `POST` under
 *   `/api/project/{project_name}/runs/` with a JSON body, authenticated by `Authorization: Bearer
 *   <token>` (`security/permissions.py` `ProjectMember`);
 * - request bodies: `src/dstack/_internal/server/schemas/runs.py` (`ApplyRunPlanRequest`,
 *   `GetRunRequest`, `StopRunsRequest`);
 * - models: `src/dstack/_internal/core/models/runs.py` (`RunSpec`, `Run`, `RunStatus`,
 *   `JobSubmission`, `ApplyRunPlanInput`) and `core/models/configurations.py`
 *   (`TaskConfiguration` with `nodes`, `DevEnvironmentConfiguration` with `ide`, the profile
 *   parameter `fleets`).
 *
 * - logs: `src/dstack/_internal/server/routers/logs.py` (`POST /api/project/{project_name}/logs/poll`),
 *   `server/schemas/logs.py` (`PollLogsRequest`) and `core/models/logs.py` (`JobSubmissionLogs`,
 *   `LogEvent` — `message` is the output's bytes in base64, as dstack's own client decodes it with
 *   `base64.b64decode(log.message)` in `api/_public/runs.py`).
 *
 * Only the fields this agent sends or reads are modelled; responses are parsed leniently
 * (dstack adds fields between versions) but every field read is checked.
 */

/** `RunStatus` (core/models/runs.py). */
export const RUN_STATUSES = [
  'pending',
  'submitted',
  'provisioning',
  'running',
  'terminating',
  'terminated',
  'failed',
  'done',
] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];
/** `RunStatus.finished_statuses()`: nothing of the run executes any more. */
export const FINISHED_RUN_STATUSES: readonly RunStatus[] = ['terminated', 'failed', 'done'];

/** dstack run names: lower-case letters, digits and dashes (`validate_dstack_resource_name`). */
export const RUN_NAME_PATTERN = /^[a-z][a-z0-9-]{1,40}$/;

/** `TaskConfiguration` (configurations.py): the fields the agent sets. */
export const TaskConfigurationSchema = z
  .object({
    type: z.literal('task'),
    name: z.string().regex(RUN_NAME_PATTERN).optional(),
    commands: z.array(z.string()).min(1),
    env: z.record(z.string(), z.string()).optional(),
    /** `TaskConfigurationParams.nodes` (ge=1): a distributed task spans this many instances. */
    nodes: z.number().int().min(1).optional(),
    working_dir: z.string().nullable().optional(),
    /** Always set: dstack's default image is amd64-only (docs/executors.md, ADR 0140). */
    image: z.string().min(1),
    /** `InstanceMountPoint` (core/models/volumes.py): host dirs the container sees. */
    volumes: z.array(z.object({ instance_path: z.string(), path: z.string() }).strict()).optional(),
    /** `ProfileParams.fleets`: run only on instances of these fleets. */
    fleets: z.array(z.string()).nullable().optional(),
    max_duration: z
      .union([z.literal('off'), z.number().int(), z.string()])
      .nullable()
      .optional(),
  })
  .strict();

/** `DevEnvironmentConfiguration` (configurations.py): the fields the agent sets. */
export const DevEnvironmentConfigurationSchema = z
  .object({
    type: z.literal('dev-environment'),
    name: z.string().regex(RUN_NAME_PATTERN).optional(),
    /** `DevEnvironmentConfigurationParams.ide`; absent means SSH only. */
    ide: z.enum(['vscode', 'cursor', 'windsurf', 'zed']).nullable().optional(),
    init: z.array(z.string()).optional(),
    env: z.record(z.string(), z.string()).optional(),
    image: z.string().min(1),
    fleets: z.array(z.string()).nullable().optional(),
    inactivity_duration: z
      .union([z.literal('off'), z.number().int(), z.string()])
      .nullable()
      .optional(),
  })
  .strict();

/** `RunSpec` (core/models/runs.py): `configuration` is discriminated by `type`. */
export const RunSpecSchema = z
  .object({
    run_name: z.string().regex(RUN_NAME_PATTERN).nullable().optional(),
    repo_id: z.string().nullable().optional(),
    configuration_path: z.string().nullable().optional(),
    configuration: z.discriminatedUnion('type', [TaskConfigurationSchema, DevEnvironmentConfigurationSchema]),
    ssh_key_pub: z.string().nullable().optional(),
  })
  .strict();
export type RunSpec = z.infer<typeof RunSpecSchema>;

/** `ApplyRunPlanRequest` (server/schemas/runs.py) around `ApplyRunPlanInput` (core/models/runs.py). */
export const ApplyRunPlanRequestSchema = z
  .object({
    plan: z.object({ run_spec: RunSpecSchema, current_resource: z.null().optional() }).strict(),
    force: z.boolean(),
  })
  .strict();
/** `GetRunRequest` (server/schemas/runs.py). */
export const GetRunRequestSchema = z
  .object({ run_name: z.string().nullable().optional(), id: z.string().nullable().optional() })
  .strict();
/** `StopRunsRequest` (server/schemas/runs.py): `abort: false` lets the job stop gracefully. */
export const StopRunsRequestSchema = z
  .object({ runs_names: z.array(z.string()).min(1), abort: z.boolean() })
  .strict();

/** `JobSubmission` (core/models/runs.py): what the agent reads of it. */
const JobSubmissionSchema = z.object({
  /** The submission's UUID, which `logs/poll` asks by (`job_submission_id`). */
  id: z.string().optional(),
  status: z.string(),
  exit_status: z.number().int().nullable().optional(),
  /** `JobTerminationReason` (e.g. `failed_to_start_due_to_no_capacity`) and its message. */
  termination_reason: z.string().nullable().optional(),
  termination_reason_message: z.string().nullable().optional(),
});

/** `Run` (core/models/runs.py): what the agent reads of it. */
export const RunSchema = z.object({
  id: z.string(),
  project_name: z.string(),
  status: z.enum(RUN_STATUSES),
  termination_reason: z.string().nullable().optional(),
  run_spec: z.object({ run_name: z.string().nullable().optional() }).passthrough(),
  jobs: z.array(
    z.object({
      job_spec: z.object({ job_num: z.number().int(), job_name: z.string() }).passthrough(),
      job_submissions: z.array(JobSubmissionSchema),
    }),
  ),
  latest_job_submission: JobSubmissionSchema.nullable().optional(),
});
export type DstackRun = z.infer<typeof RunSchema>;

const ErrorDetailSchema = z.object({ msg: z.string(), code: z.string().nullable().optional() }).passthrough();
/**
 * dstack's error bodies: a `ServerClientError` is HTTP 400 `{"detail": [{"msg", "code"}]}`
 * (`server/app.py`, `server/utils/routers.py` `get_server_client_error_details`; `Run not found`
 * has code `resource_not_exists`); FastAPI's validation error is 422 with a list of `{msg, loc,
 * type}`; an `HTTPException` (invalid token 403, unknown project 404) carries one object.
 */
export const ErrorBodySchema = z.object({
  detail: z.union([z.array(ErrorDetailSchema), ErrorDetailSchema, z.string()]),
});
/** The messages of an error body, or null when it is not one of dstack's. */
export function errorMessages(json: unknown): { msg: string; code: string | null }[] | null {
  const e = ErrorBodySchema.safeParse(json);
  if (!e.success) return null;
  const d = e.data.detail;
  if (typeof d === 'string') return [{ msg: d, code: null }];
  return (Array.isArray(d) ? d : [d]).map((x) => ({ msg: x.msg, code: x.code ?? null }));
}

/** dstack's `UUID4` fields, as pydantic accepts them (hex with dashes). */
const UUID4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;

/** `PollLogsRequest` (server/schemas/logs.py). */
export const PollLogsRequestSchema = z
  .object({
    run_name: z.string(),
    job_submission_id: z.string().regex(UUID4, 'job_submission_id is a UUID4'),
    start_time: z.iso.datetime({ offset: true }).nullable().optional(),
    end_time: z.iso.datetime({ offset: true }).nullable().optional(),
    descending: z.boolean().optional(),
    limit: z.number().int().min(0).max(1000).optional(),
    diagnose: z.boolean().optional(),
    next_token: z.string().nullable().optional(),
  })
  .strict();
export type PollLogsRequest = z.infer<typeof PollLogsRequestSchema>;

/** `LogEvent` (core/models/logs.py): `message` is base64 of the raw output bytes. */
export const LogEventSchema = z.object({
  timestamp: z.string(),
  log_source: z.enum(['stdout', 'stderr']),
  message: z.string(),
});

/** `JobSubmissionLogs` (core/models/logs.py). */
export const JobSubmissionLogsSchema = z.object({
  logs: z.array(LogEventSchema),
  next_token: z.string().nullable().optional(),
});
