import { apiModule } from './api/index.ts';
import type { AppModule } from './app.ts';
import { dashboardModule } from './dashboard/index.ts';
import { leasesApiModule } from './leases-api/index.ts';
import { metricsModule } from './metrics/index.ts';

/**
 * The controller's parts, mounted in this order by both entries (Node and Workers).
 * Each module lives in its own folder under functions/ and registers itself here with one line.
 */
export const appModules: AppModule[] = [leasesApiModule, apiModule, dashboardModule, metricsModule];
