import { agentApiModule } from './agent-api/index.ts';
import { apiModule } from './api/index.ts';
import type { AppModule } from './app.ts';
import { dashboardModule } from './dashboard/index.ts';
import { githubModule } from './github/module.ts';
import { leasesApiModule } from './leases-api/index.ts';
import { metricsModule } from './metrics/index.ts';

/**
 * The controller's parts, mounted in this order by both entries (Node and Workers).
 * Each module lives in its own folder under functions/ and registers itself here with one line.
 */
export const appModules: AppModule[] = [
  githubModule,
  agentApiModule,
  leasesApiModule,
  apiModule,
  dashboardModule,
  metricsModule,
];
