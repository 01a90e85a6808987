import type { Hono } from 'hono';
import type { AppModule } from '../app.ts';
import type { AuthEnv } from '../auth/tokens.ts';
import { mountApiRoutes } from './routes.ts';

/** Issue 6: the operator/user API under `/api/v1` (reservations, hosts, Deckard, tokens). */
export const apiModule: AppModule = {
  name: 'api',
  routes(app, ctx) {
    // the scope middlewares add `principal` to the context variables of the routes they guard
    mountApiRoutes(app as unknown as Hono<AuthEnv>, ctx);
  },
};
