import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { serverClientError } from './models.ts';

/**
 * The dstack stand-in's fleets: what `POST /api/project/{project}/fleets/get` answers, played
 * from dstack's source (dstackai/dstack tag 0.21.2, commit
 * 0dee238d47fafc89bdde75b83ee99a0fae7c08a1, under `src/dstack/_internal/`):
 *
 * - `GetFleetRequest{name?, id?}` (server/schemas/fleets.py); neither given is a
 *   `ServerClientError("name or id must be specified")`;
 * - a fleet the project does not have (or a deleted one asked for by name) is
 *   `ResourceNotExistsError` (core/errors.py, code `resource_not_exists`, msg "Resource not
 *   found"), answered 400 `{"detail": [{msg, code}]}` (server/app.py);
 * - `Fleet{id, name, project_name, spec, created_at, status, status_message, instances}`
 *   (core/models/fleets.py; `FleetStatus`), `Instance{id, project_name, backend, instance_type,
 *   name, fleet_id, fleet_name, instance_num, job_name, hostname, status, unreachable,
 *   health_status, termination_reason, termination_reason_message, created, finished_at, region,
 *   availability_zone, price, total_blocks, busy_blocks}` (core/models/instances.py;
 *   `InstanceStatus`, `HealthStatus` in core/models/health.py). An on-prem SSH fleet's instances
 *   have backend `remote` (core/models/backends/base.py `BackendType.REMOTE`).
 *
 * A stand-in has no fleet until a test adds one, as a dstack server has none until an operator
 * applies a fleet configuration (docs/executors.md "Operator setup").
 */

export type FleetStatus = 'submitted' | 'active' | 'terminating' | 'terminated' | 'failed';
export type InstanceStatus = 'pending' | 'provisioning' | 'idle' | 'busy' | 'terminating' | 'terminated';

export interface StandInFleet {
  id: string;
  name: string;
  status: FleetStatus;
  statusMessage: string | null;
  createdAt: string;
  deleted: boolean;
  instances: {
    id: string;
    name: string;
    hostname: string;
    status: InstanceStatus;
    unreachable: boolean;
    healthStatus: 'healthy' | 'warning' | 'failure';
  }[];
}

/** An on-prem SSH fleet of one host, as `dstack apply -f fleet.dstack.yml` leaves it once its instance is up. */
export function sshFleet(
  name: string,
  o: {
    hostname?: string;
    status?: FleetStatus;
    instance?: Partial<Pick<StandInFleet['instances'][number], 'status' | 'unreachable' | 'healthStatus'>>;
    instances?: 0 | 1;
  } = {},
): StandInFleet {
  return {
    id: randomUUID(),
    name,
    status: o.status ?? 'active',
    statusMessage: null,
    createdAt: new Date().toISOString(),
    deleted: false,
    instances:
      o.instances === 0
        ? []
        : [
            {
              id: randomUUID(),
              name: `${name}-0`,
              hostname: o.hostname ?? `${name}.internal`,
              status: o.instance?.status ?? 'idle',
              unreachable: o.instance?.unreachable ?? false,
              healthStatus: o.instance?.healthStatus ?? 'healthy',
            },
          ],
  };
}

/** `GetFleetRequest` (server/schemas/fleets.py): extra fields are refused like the server's CoreModel. */
export const GetFleetRequest = z
  .object({ name: z.string().nullable().optional(), id: z.uuid().nullable().optional() })
  .strict();

/** `Fleet` as the server serializes it. */
function view(f: StandInFleet, project: string) {
  return {
    id: f.id,
    name: f.name,
    project_name: project,
    spec: {
      configuration: {
        type: 'fleet',
        name: f.name,
        ssh_config: { hosts: f.instances.map((i) => i.hostname) },
        placement: 'any',
      },
      configuration_path: 'fleet.dstack.yml',
      profile: { name: 'default' },
      autocreated: false,
    },
    created_at: f.createdAt,
    status: f.status,
    status_message: f.statusMessage,
    instances: f.instances.map((i, n) => ({
      id: i.id,
      project_name: project,
      backend: 'remote',
      instance_type: null,
      name: i.name,
      fleet_id: f.id,
      fleet_name: f.name,
      instance_num: n,
      job_name: null,
      hostname: i.hostname,
      status: i.status,
      unreachable: i.unreachable,
      health_status: i.healthStatus,
      termination_reason: null,
      termination_reason_message: null,
      created: f.createdAt,
      finished_at: null,
      region: 'remote',
      availability_zone: null,
      price: 0,
      total_blocks: 1,
      busy_blocks: i.status === 'busy' ? 1 : 0,
    })),
  };
}

/** `fleets/get` (server/routers/fleets.py `get_fleet`) over the stand-in's fleets. */
export function getFleet(
  fleets: ReadonlyMap<string, StandInFleet>,
  body: z.output<typeof GetFleetRequest>,
  project: string,
): { status: number; body: unknown } {
  if (body.id == null && body.name == null) return serverClientError('name or id must be specified');
  const f =
    body.id != null
      ? [...fleets.values()].find((x) => x.id === body.id)
      : [...fleets.values()].find((x) => x.name === body.name && !x.deleted);
  if (!f) return serverClientError('Resource not found', 'resource_not_exists');
  return { status: 200, body: view(f, project) };
}
