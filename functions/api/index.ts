import type { AppModule } from '../app.ts';
import { mountApiRoutes } from './routes.ts';

/** the operator/user API under `/api/v1` (reservations, hosts, Deckard, tokens). */
export const apiModule: AppModule = {
  name: 'api',
  operatorRoutes(api, ctx) {
    mountApiRoutes(api, ctx);
  },
};
